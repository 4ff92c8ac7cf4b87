// `k3 run -m DIR -p PROMPT | -f FILE [sampling flags]`: tokenizes the prompt (no [BOS], specials
// as plain text), prints it, then streams the continuation to stdout token by token (UTF-8
// safe) until a stop token (<|end_of_msg|>, [EOS]), -n tokens or a full context (-c).
// End-of-run stats go to stderr. --json prints one JSON object instead (for scripts/tests).
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"
#include "core/error.h"
#include "core/read_file.h"
#include "flag_checks.h"
#include "gen_flags.h"
#include "runtime/generator.h"
#include "runtime/loaded_model.h"
#include "runtime/nonfinite.h"
#include "runtime/stats.h"
#include "tokenizer/stream_decoder.h"

namespace {

struct RunOptions {
  k3cli::GenFlags gen;
  std::string prompt;
  std::string prompt_file;
  std::string prompt_ids;
  bool ignore_eos = false;
  bool no_stats = false;
  bool json = false;
  bool strict_utf8 = false;
  k3cli::InputLimit input_limit;
};


std::vector<int32_t> parse_ids(const std::string& s, int32_t vocab) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::size_t pos = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    if (pos == 0 || pos != item.size() || v < 0 || v >= vocab)
      throw k3::Error("--prompt-ids: expected comma-separated ids in [0, " + std::to_string(vocab) + "), found '" + item + "'");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

void run(const RunOptions& o) {
  const int n_sources = !o.prompt.empty() + !o.prompt_file.empty() + !o.prompt_ids.empty();
  if (n_sources != 1)
    throw k3::Error(n_sources == 0 ? "k3 run: no prompt (give -p TEXT, -f FILE or --prompt-ids LIST)"
                                   : "k3 run: give exactly one of -p, -f and --prompt-ids");
  if (o.gen.n_predict < -1)
    throw k3::Error("-n/--n-predict: expected -1 (until stop) or >= 0, found " + std::to_string(o.gen.n_predict));
  const k3::SamplerParams sp = o.gen.sampler_params();
  const std::string prompt_text =
      !o.prompt_file.empty() ? k3::read_file_bounded(o.prompt_file, "-f/--file", o.input_limit.limits()) : o.prompt;
  if (o.prompt_ids.empty()) k3cli::check_utf8(prompt_text, o.strict_utf8, o.prompt_file.empty() ? "-p/--prompt" : "-f/--file '" + o.prompt_file + "'");
  k3cli::set_threads(o.gen.threads);

  k3::LoadedModel lm = k3::LoadedModel::open(o.gen.model_dir);
  const k3::Tokenizer& tok = *lm.tokenizer;
  const std::vector<int32_t> prompt =
      o.prompt_ids.empty() ? tok.encode(prompt_text) : parse_ids(o.prompt_ids, tok.vocab_size());
  if (prompt.empty()) throw k3::Error("k3 run: the prompt is empty (expected at least 1 token)");
  k3::check_prompt_fits(0, static_cast<int64_t>(prompt.size()), o.gen.n_ctx);  // before printing anything

  k3::GenerateOptions go;
  go.n_predict = o.gen.n_predict;
  go.n_ctx = o.gen.n_ctx;
  go.n_batch = o.gen.n_batch;
  go.n_vocab = tok.vocab_size();
  if (!o.ignore_eos) go.stop_ids = lm.stop_ids();

  k3::Sampler sampler(sp);
  k3::SequenceState seq = lm.model->new_sequence();
  k3::StreamDecoder dec(tok, /*skip_special=*/true);
  std::string text;
  if (!o.json) {
    std::string shown = o.prompt_ids.empty() ? prompt_text : tok.decode(prompt, true);
    std::fwrite(shown.data(), 1, shown.size(), stdout);
    std::fflush(stdout);
  }
  auto on_token = [&](int32_t id) {
    const std::string piece = dec.push(id);
    text += piece;
    if (!o.json && !piece.empty()) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  k3::GenerateResult r;
  try {
    r = k3::generate(*lm.model, seq, prompt, sampler, go, on_token);
  } catch (const k3::Error& e) {
    if (!o.json) std::fputc('\n', stdout);
    throw k3::Error(k3::explain_forward_error(e, *lm.model, prompt));
  }
  const std::string tail = dec.flush();
  text += tail;

  k3::RunStats st;
  st.load_ms = lm.load_ms;
  st.n_prompt = r.n_prompt;
  st.prompt_ms = r.prompt_ms;
  st.n_gen = static_cast<int64_t>(r.ids.size());
  st.gen_ms = r.gen_ms;
  st.state_bytes = seq.bytes();
  st.seed = sp.seed;
  st.show_seed = sp.temp > 0;

  if (o.json) {
    nlohmann::json j;
    j["prompt_ids"] = prompt;
    j["ids"] = r.ids;
    j["text"] = text;
    j["stop"] = k3::stop_reason_name(r.stop);
    j["stop_id"] = r.stop_id;
    j["seed"] = sp.seed;
    j["stats"] = {{"load_ms", st.load_ms}, {"n_prompt", st.n_prompt}, {"prompt_ms", st.prompt_ms},
                  {"n_gen", st.n_gen}, {"gen_ms", st.gen_ms}, {"peak_rss_bytes", k3::peak_rss_bytes()},
                  {"state_bytes", st.state_bytes}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  if (!o.no_stats) {
    if (r.stop == k3::StopReason::ContextFull)
      std::fprintf(stderr, "k3 run: stopped: context full (-c %lld)\n", static_cast<long long>(o.gen.n_ctx));
    std::fprintf(stderr, "%s\n", st.line().c_str());
  }
}

k3cli::Registrar reg("run", "Generate a continuation of a prompt, streamed to stdout (llama.cpp-style flags)",
                     [](CLI::App* sub) {
                       auto o = std::make_shared<RunOptions>();
                       o->gen.add_to(sub);
                       sub->add_option("-p,--prompt", o->prompt, "prompt text (raw, no chat template, no [BOS])");
                       sub->add_option("-f,--file", o->prompt_file, "read the prompt from this file");
                       sub->add_option("--prompt-ids", o->prompt_ids, "prompt as comma-separated token ids");
                       sub->add_flag("--strict-utf8", o->strict_utf8, "refuse a prompt that is not valid UTF-8 (default: warn)");
                       o->input_limit.add_to(sub);
                       sub->add_flag("--ignore-eos", o->ignore_eos, "do not stop at <|end_of_msg|> / [EOS]");
                       sub->add_flag("--no-stats", o->no_stats, "do not print the stats line on stderr");
                       sub->add_flag("--json", o->json,
                                     "print one JSON object (prompt_ids, ids, text, stop, stats) instead of streaming");
                       sub->callback([o] { run(*o); });
                     });

}  // namespace
