// `k3 perplexity -m DIR -f FILE [-c N] [--stride S] [--json]`: perplexity of a text file with
// the sliding-window definition of runtime/perplexity.h (shared with the K3-mini trainer):
// the file is tokenized as one string without [BOS]. Progress on stderr, the result on stdout:
// "ppl = X ± Y over N tokens".
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "command.h"
#include "ranks.h"
#include "core/error.h"
#include "core/read_file.h"
#include "flag_checks.h"
#include "gen_flags.h"
#include "runtime/loaded_model.h"
#include "runtime/perplexity.h"
#include "runtime/stats.h"

namespace {

struct PplOptions {
  std::string model_dir;
  std::string file;
  int64_t n_ctx = 4096;
  int64_t stride = 0;
  int64_t n_batch = 512;
  int threads = 0;
  bool json = false;
  k3cli::InputLimit input_limit;
  k3cli::NumericsFlag numerics;  ///< default k3::default_numerics()
  k3cli::CacheTypeFlag cache_type;  ///< --cache-type
};

// Progress bar on stderr: redrawn in place on a terminal, a line every ~10% otherwise.
class Progress {
 public:
  Progress() : tty_(isatty(2) != 0) {}
  void update(int64_t done, int64_t total, int64_t tokens_done, double ms) {
    const double frac = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
    const double tps = ms > 0 ? static_cast<double>(tokens_done) * 1000.0 / ms : 0.0;
    if (tty_) {
      const int width = 30, fill = static_cast<int>(frac * width + 0.5);
      std::string bar(static_cast<std::size_t>(fill), '=');
      bar.resize(width, ' ');
      std::fprintf(stderr, "\rperplexity [%s] %3.0f%%  window %lld/%lld  %.1f tok/s", bar.c_str(), frac * 100.0,
                   static_cast<long long>(done), static_cast<long long>(total), tps);
      if (done == total) std::fputc('\n', stderr);
    } else {
      const int decile = static_cast<int>(frac * 10.0);
      if (decile <= last_decile_ && done != total) return;
      last_decile_ = decile;
      std::fprintf(stderr, "perplexity: %3.0f%%  window %lld/%lld  %.1f tok/s\n", frac * 100.0,
                   static_cast<long long>(done), static_cast<long long>(total), tps);
    }
    std::fflush(stderr);
  }

 private:
  bool tty_;
  int last_decile_ = -1;
};

void run(const PplOptions& o) {
  k3::perplexity_windows(2, o.n_ctx, o.stride == 0 ? o.n_ctx / 2 : o.stride);  // flag check before loading
  const k3::MlaCacheType cache_type = o.cache_type.type();                        // likewise
  const std::string text = k3::read_file_bounded(o.file, "-f/--file", o.input_limit.limits());
  k3cli::check_utf8(text, false, "-f/--file '" + o.file + "'");
  k3cli::set_threads(o.threads);
  k3::ModelOptions mo;
  mo.exec = o.numerics.exec(k3::default_numerics(), o.threads);
  mo.comm = k3cli::world();  // under N ranks every rank runs the same windows (ranks.h)
  mo.mla_cache = cache_type;
  k3::LoadedModel lm = k3::LoadedModel::open(o.model_dir, mo);
  k3cli::check_ranks(*lm.checkpoint, *lm.model);
  const std::vector<int32_t> tokens = lm.tokenizer->encode(text);
  k3cli::check_same_input({tokens}, "text (its token ids)");
  const int64_t stride = o.stride == 0 ? o.n_ctx / 2 : o.stride;
  const std::vector<int64_t> starts = k3::perplexity_windows(static_cast<int64_t>(tokens.size()), o.n_ctx, stride);

  // tokens fed per window, for the rate shown in the progress bar
  std::vector<int64_t> fed_after(starts.size());
  int64_t fed = 0;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    fed += std::min<int64_t>(starts[i] + o.n_ctx, static_cast<int64_t>(tokens.size())) - starts[i] - 1;
    fed_after[i] = fed;
  }
  Progress progress;
  k3::Timer t;
  k3::PerplexityOptions po;
  po.n_ctx = o.n_ctx;
  po.stride = stride;
  po.n_batch = o.n_batch;
  // softmax over the model's whole vocabulary, as the trainer's evaluation does
  po.on_window = [&](int64_t done, int64_t total) {
    progress.update(done, total, fed_after[static_cast<std::size_t>(done - 1)], t.ms());
  };
  const k3::PerplexityResult r = k3::perplexity(*lm.model, tokens, po);
  const double ms = t.ms();
  const double unigram = k3::unigram_perplexity(tokens);

  if (o.json) {
    nlohmann::json j;
    j["ppl"] = r.ppl;
    j["ppl_err"] = r.ppl_err;
    j["mean_nll"] = r.mean_nll;
    j["unigram_ppl"] = unigram;
    j["n_tokens"] = tokens.size();
    j["n_scored"] = r.n_scored;
    j["n_ctx"] = o.n_ctx;
    j["stride"] = stride;
    j["windows"] = r.n_windows;
    j["seconds"] = ms / 1000.0;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("ppl = %.4f ± %.4f over %lld tokens\n", r.ppl, r.ppl_err, static_cast<long long>(r.n_scored));
  }
  std::fflush(stdout);
  std::fprintf(stderr, "unigram baseline (in-sample counts, same tokens): ppl = %.4f\n", unigram);
  std::fprintf(
      stderr,
      "load: %.0f ms | %lld tokens in %lld windows (ctx %lld, stride %lld) | %.1f s, %.1f tok/s | peak RSS: %.1f MiB\n",
      lm.load_ms, static_cast<long long>(tokens.size()), static_cast<long long>(r.n_windows),
      static_cast<long long>(o.n_ctx), static_cast<long long>(stride), ms / 1000.0,
      ms > 0 ? static_cast<double>(fed) * 1000.0 / ms : 0.0,
      static_cast<double>(k3::peak_rss_bytes()) / (1024.0 * 1024.0));
}

k3cli::Registrar reg(
    "perplexity", "Perplexity of a text file (sliding window, stride ctx/2 by default)", [](CLI::App* sub) {
      auto o = std::make_shared<PplOptions>();
      sub->add_option("-m,--model", o->model_dir, "K3 checkpoint directory")->required();
      sub->add_option("-f,--file", o->file, "text file (tokenized as one string, no [BOS])")->required();
      sub->add_option("-c,--ctx-size", o->n_ctx, "window size in tokens")
          ->capture_default_str()
          ->check(k3cli::IntRange(2));
      sub->add_option("--stride", o->stride, "window step in tokens (0 = ctx-size / 2)")
          ->capture_default_str()
          ->check(k3cli::IntRange(0));
      sub->add_option("-b,--batch-size", o->n_batch, "tokens per forward call")
          ->capture_default_str()
          ->check(k3cli::IntRange(1));
      sub->add_option("-t,--threads", o->threads, "worker threads (0 = all hardware threads)")
          ->capture_default_str()
          ->check(k3cli::IntRange(0, 1 << 20));
      o->input_limit.add_to(sub);
      o->numerics.add_to(sub);
      o->cache_type.add_to(sub);
      sub->add_flag("--json", o->json, "print the result as one JSON object");
      sub->callback([o] { run(*o); });
    });

}  // namespace
