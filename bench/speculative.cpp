// Speculative decoding benchmark (not a test).
//
//   k3_bench_speculative verify MODEL_DIR [--ctx N=64] [--kmax K=8] [--runs R=5] [--threads T]
//     Verify cost ratio: median time of one decode-form forward over k+1 tokens (with the per-token
//     KDA snapshots speculative rollback uses) divided by one one-token decode step, k = 1..K; also
//     the chunked (prefill-path) forward of k+1 tokens, the snapshot bytes, the rollback time, and
//     the replay alternative (one KDA snapshot + re-running the kept tokens' KDA decode steps:
//     bytes, and ms per kept token from kda_decode_step at the model's KDA width).
//
//   k3_bench_speculative accept MODEL_DIR [--draft DIR] [--text FILE] [--n N=128] [--runs R=3]
//                        [--kmax-list 2,4,8] [--threads T]
//     Tokens/s and acceptance without speculation, with prompt lookup (ngram-simple, n = 3) and
//     with the draft model, on three tasks built from FILE (default MODEL_DIR/heldout.txt):
//       real text  — 4 passages of ~160 tokens, greedy continuation of N tokens;
//       repetitive — "quote" a passage: the passage, a blank line, then its first 12 tokens;
//                    greedy continuation of N tokens (the model copies the passage);
//       free       — "And God said" etc., sampled at the default settings (temp 0.8, top-k 40,
//                    top-p 0.95, min-p 0.05), seeds 1..R.
//     Medians over runs of decode tokens/s (generate()'s gen_ms, prefill excluded).
//
//   k3_bench_speculative loop MODEL_DIR [--n N=32] [--runs R=3] [--kmax-list 4,8] [--threads T]
//     No tokenizer needed (the K3-width bench model): greedy continuation of a 48-id block
//     repeated 3 times, plain vs prompt lookup; checks the ids are identical.
//
//   Every mode: [--trunk-type bf16|q8|q4] (the trunk quantized at load); the numerics mode from
//   K3_NUMERICS (default exact), e.g. K3_NUMERICS=int8 ... --trunk-type q8 for the int8 q8 trunk.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/kda_decode.h"
#include "kernels/threads.h"
#include "model/k3_model.h"
#include "kernels/numerics.h"
#include "kernels/q8q4_trunk.h"
#include <optional>
#include "runtime/draft_model.h"
#include "runtime/generator.h"
#include "runtime/loaded_model.h"
#include "runtime/ngram_drafter.h"
#include "runtime/speculative.h"
#include "tools/exec_env.h"

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// --trunk-type q8|q4 (model/weights.h quantize_trunk); unset: the BF16 trunk.
std::optional<k3::QuantKind> g_trunk;
k3::ModelOptions model_options() {
  k3::ModelOptions o;
  o.trunk_quant = g_trunk;
  return o;
}

std::string arg(int argc, char** argv, const char* name, const char* def) {
  for (int i = 2; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}

void bench_verify(const std::string& dir, int64_t ctx, int64_t kmax, int runs) {
  auto ck = k3::Checkpoint::open(dir);  // no tokenizer needed (the bench model has none)
  const k3::Model m(*ck, model_options());
  const int64_t n_vocab = m.config().vocab_size;
  std::vector<int32_t> prompt(static_cast<size_t>(ctx));
  for (int64_t i = 0; i < ctx; ++i) prompt[i] = static_cast<int32_t>((i * 131 + 7) % n_vocab);
  k3::SequenceState base = m.new_sequence();
  m.forward(base, prompt, false);
  std::vector<int32_t> win(static_cast<size_t>(kmax + 1));
  for (int64_t i = 0; i <= kmax; ++i) win[i] = static_cast<int32_t>((i * 17 + 3) % n_vocab);
  // One decode step.
  std::vector<double> t1;
  for (int r = 0; r < runs; ++r) {
    k3::SequenceState s = base;
    const double t0 = now_ms();
    m.forward(s, std::span<const int32_t>(win.data(), 1), false);
    t1.push_back(now_ms() - t0);
  }
  const double step = median(t1);
  int64_t n_kda = 0;
  for (const auto& L : m.config().plan) n_kda += L.attn == k3::AttnKind::KDA;
  const int64_t rec = n_kda > 0 ? base.snapshot_floats() / n_kda : 0;
  // Replay alternative: the KDA decode step alone at this width, per layer.
  const int H = m.config().kda_num_heads, d = m.config().kda_head_dim;
  std::vector<float> q(H * d, 0.01f), k(H * d, 0.02f), v(H * d, 0.03f), g(H * d, -0.1f), beta(H, 0.5f),
      S(static_cast<size_t>(H) * d * d, 0.0f), o(H * d);
  std::vector<double> tk;
  for (int r = 0; r < std::max(runs, 5); ++r) {
    const double t0 = now_ms();
    k3::kda_decode_step(H, d, d, q.data(), k.data(), v.data(), g.data(), beta.data(), S.data(), o.data());
    tk.push_back(now_ms() - t0);
  }
  const double kda_step = median(tk);
  std::printf(
      "model %s | prefix %lld tokens | one decode step %.3f ms | KDA layers %lld, state record %.2f MiB "
      "per layer | kda_decode_step %.3f ms per layer\n",
      dir.c_str(), static_cast<long long>(ctx), step, static_cast<long long>(n_kda), rec * 4.0 / 1048576.0, kda_step);
  std::printf(
      "| k | verify (decode form + snapshots) ms | ratio to one step | chunked forward ms | snapshot MiB | "
      "rollback ms (keep 1) | replay: MiB, ms per kept token |\n|---|---|---|---|---|---|---|\n");
  for (int64_t kk = 1; kk <= kmax; ++kk) {
    const std::span<const int32_t> w(win.data(), static_cast<size_t>(kk + 1));
    std::vector<double> tv, tc, tr;
    k3::StateLog steps;
    for (int r = 0; r < runs; ++r) {
      k3::SequenceState s = base;
      k3::BatchEntry e{&s, w, k3::BatchLogits::All};
      e.per_token = true;
      e.kda_steps = &steps;
      double t0 = now_ms();
      m.forward_batch(std::span<const k3::BatchEntry>(&e, 1));
      tv.push_back(now_ms() - t0);
      t0 = now_ms();
      s.rollback_to(steps, steps.first());
      tr.push_back(now_ms() - t0);
      k3::SequenceState c = base;
      t0 = now_ms();
      m.forward(c, w, true);
      tc.push_back(now_ms() - t0);
    }
    const double mib = static_cast<double>(steps.floats().size()) * 4.0 / 1048576.0;
    std::printf("| %lld | %.3f | %.2f | %.3f | %.1f | %.3f | %.1f, %.3f |\n", static_cast<long long>(kk), median(tv),
                median(tv) / step, median(tc), mib, median(tr), n_kda * rec * 4.0 / 1048576.0, n_kda * kda_step);
  }
}

std::vector<int32_t> slice(const std::vector<int32_t>& v, size_t a, size_t n) {
  return std::vector<int32_t>(v.begin() + std::min(a, v.size()), v.begin() + std::min(a + n, v.size()));
}

void bench_accept(const std::string& dir, const std::string& draft_dir, const std::string& text_file, int64_t n,
                  int runs, const std::vector<int64_t>& kmaxes) {
  const k3::LoadedModel lm = k3::LoadedModel::open(dir, model_options());
  std::unique_ptr<k3::LoadedModel> draft;
  if (!draft_dir.empty()) draft = std::make_unique<k3::LoadedModel>(k3::LoadedModel::open(draft_dir));
  const k3::Tokenizer& tok = *lm.tokenizer;
  std::ifstream f(text_file);
  if (!f) throw k3::Error("--text: cannot read " + text_file);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::vector<int32_t> all = tok.encode(ss.str());
  struct Task {
    std::string name;
    std::vector<std::vector<int32_t>> prompts;
    bool sample;
  };
  std::vector<Task> tasks(3);
  tasks[0].name = "real text";
  tasks[1].name = "repetitive (quote)";
  tasks[2].name = "free (temp 0.8)";
  tasks[2].sample = true;
  for (int i = 0; i < 4; ++i) {
    tasks[0].prompts.push_back(slice(all, 1000 + i * 2500, 160));
    std::vector<int32_t> q = slice(all, 600 + i * 2500, 160);
    const std::vector<int32_t> sep = tok.encode("\n\n");
    std::vector<int32_t> p = q;
    p.insert(p.end(), sep.begin(), sep.end());
    p.insert(p.end(), q.begin(), q.begin() + 12);
    tasks[1].prompts.push_back(p);
  }
  for (const char* s : {"And God said", "In the beginning", "Blessed are the", "And it came to pass"})
    tasks[2].prompts.push_back(tok.encode(s));
  struct Conf {
    std::string name;
    int64_t kmax;
    int kind;  // 0 none, 1 lookup, 2 draft model
  };
  std::vector<Conf> confs = {{"plain", 0, 0}};
  for (int64_t k : kmaxes) confs.push_back({"prompt lookup", k, 1});
  if (draft)
    for (int64_t k : kmaxes) confs.push_back({"draft " + draft_dir, k, 2});
  std::printf("model %s | %lld tokens per prompt | medians of %d runs\n", dir.c_str(), static_cast<long long>(n), runs);
  std::printf(
      "| task | drafter | --draft-max | decode tok/s | speed-up | accepted / drafted | tokens per verify |\n"
      "|---|---|---|---|---|---|---|\n");
  for (const Task& t : tasks) {
    double plain_tps = 0;
    // Interleave: every configuration once per run, runs outer.
    std::vector<std::vector<double>> tps(confs.size());
    std::vector<k3::SpecStats> st(confs.size());
    for (int r = 0; r < runs; ++r)
      for (size_t c = 0; c < confs.size(); ++c) {
        double ms = 0;
        int64_t toks = 0;
        for (size_t pi = 0; pi < t.prompts.size(); ++pi) {
          k3::SamplerParams sp;
          if (!t.sample) sp.temp = 0;
          sp.seed = static_cast<uint64_t>(r * 100 + pi + 1);
          k3::Sampler s(sp);
          std::unique_ptr<k3::Speculator> spec;
          if (confs[c].kind == 1)
            spec = std::make_unique<k3::Speculator>(std::make_unique<k3::NgramDrafter>(3),
                                                    k3::SpecOptions{confs[c].kmax, 0});
          if (confs[c].kind == 2)
            spec = std::make_unique<k3::Speculator>(
                std::make_unique<k3::DraftModelDrafter>(*draft->model, sp, tok.vocab_size()),
                k3::SpecOptions{confs[c].kmax, 0});
          k3::GenerateOptions go;
          go.n_predict = n;
          go.n_vocab = tok.vocab_size();
          go.speculative = spec.get();
          k3::SequenceState seq = lm.model->new_sequence();
          const k3::GenerateResult g = k3::generate(*lm.model, seq, t.prompts[pi], s, go, [](int32_t) { return true; });
          ms += g.gen_ms;
          toks += static_cast<int64_t>(g.ids.size()) - 1;  // the first id comes from the prefill
          if (spec && r == 0) {
            st[c].verifies += spec->stats().verifies;
            st[c].drafted += spec->stats().drafted;
            st[c].accepted += spec->stats().accepted;
            st[c].emitted += spec->stats().emitted;
          }
        }
        tps[c].push_back(1000.0 * static_cast<double>(toks) / ms);
      }
    for (size_t c = 0; c < confs.size(); ++c) {
      const double v = median(tps[c]);
      if (c == 0) plain_tps = v;
      char acc[64] = "-", per[32] = "1.00";
      if (confs[c].kind) {
        std::snprintf(
            acc, sizeof acc, "%lld / %lld (%.0f%%)", static_cast<long long>(st[c].accepted),
            static_cast<long long>(st[c].drafted),
            st[c].drafted ? 100.0 * static_cast<double>(st[c].accepted) / static_cast<double>(st[c].drafted) : 0.0);
        std::snprintf(per, sizeof per, "%.2f",
                      st[c].verifies ? static_cast<double>(st[c].emitted) / static_cast<double>(st[c].verifies) : 0.0);
      }
      std::printf("| %s | %s | %s | %.0f | %.2fx | %s | %s |\n", t.name.c_str(), confs[c].name.c_str(),
                  confs[c].kind ? std::to_string(confs[c].kmax).c_str() : "-", v, v / plain_tps, acc, per);
    }
  }
}

/// Bandwidth-bound case without a tokenizer (the bench model): greedy continuation of a prompt
/// that repeats a 48-id block 3 times, plain vs prompt lookup, decode tokens/s and acceptance.
void bench_loop(const std::string& dir, int64_t n, int runs, const std::vector<int64_t>& kmaxes) {
  auto ck = k3::Checkpoint::open(dir);
  const k3::Model m(*ck, model_options());
  const int64_t n_vocab = m.config().vocab_size;
  std::vector<int32_t> block(48), prompt;
  for (int i = 0; i < 48; ++i) block[i] = static_cast<int32_t>((i * 7919 + 11) % n_vocab);
  for (int r = 0; r < 3; ++r) prompt.insert(prompt.end(), block.begin(), block.end());
  std::printf("model %s | prompt: a 48-id block x 3, greedy, %lld tokens | medians of %d runs\n", dir.c_str(),
              static_cast<long long>(n), runs);
  std::printf(
      "| drafter | --draft-max | decode tok/s | speed-up | accepted / drafted | tokens per verify |\n"
      "|---|---|---|---|---|---|\n");
  std::vector<int64_t> ks = {0};
  ks.insert(ks.end(), kmaxes.begin(), kmaxes.end());
  std::vector<std::vector<double>> tps(ks.size());
  std::vector<k3::SpecStats> st(ks.size());
  std::vector<std::vector<int32_t>> outs(ks.size());
  for (int r = 0; r < runs; ++r)
    for (size_t c = 0; c < ks.size(); ++c) {
      k3::SamplerParams sp;
      sp.temp = 0;
      k3::Sampler s(sp);
      std::unique_ptr<k3::Speculator> spec;
      if (ks[c] > 0)
        spec = std::make_unique<k3::Speculator>(std::make_unique<k3::NgramDrafter>(3), k3::SpecOptions{ks[c], 0});
      k3::GenerateOptions go;
      go.n_predict = n;
      go.speculative = spec.get();
      k3::SequenceState seq = m.new_sequence();
      const k3::GenerateResult g = k3::generate(m, seq, prompt, s, go, [](int32_t) { return true; });
      tps[c].push_back(1000.0 * static_cast<double>(g.ids.size() - 1) / g.gen_ms);
      if (spec && r == 0) st[c] = spec->stats();
      if (r == 0) outs[c] = g.ids;
    }
  for (size_t c = 0; c < ks.size(); ++c) {
    if (outs[c] != outs[0]) throw k3::Error("speculative output differs from plain decoding");
    char acc[64] = "-", per[32] = "1.00";
    if (ks[c]) {
      std::snprintf(acc, sizeof acc, "%lld / %lld", static_cast<long long>(st[c].accepted),
                    static_cast<long long>(st[c].drafted));
      std::snprintf(per, sizeof per, "%.2f", static_cast<double>(st[c].emitted) / static_cast<double>(st[c].verifies));
    }
    std::printf("| %s | %s | %.2f | %.2fx | %s | %s |\n", ks[c] ? "prompt lookup" : "plain",
                ks[c] ? std::to_string(ks[c]).c_str() : "-", median(tps[c]), median(tps[c]) / median(tps[0]), acc, per);
  }
}

}  // namespace

int main(int argc, char** argv) try {
  k3tools::exec_config({}, k3::Numerics::Exact, 0);  // K3_ISA / K3_NUMERICS / K3_MXFP4 / K3_KERNELS
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s verify MODEL_DIR [--ctx N] [--kmax K] [--runs R] [--threads T]\n"
                 "       %s accept MODEL_DIR [--draft DIR] [--text FILE] [--n N] [--runs R] [--kmax-list 2,4,8] "
                 "[--threads T]\n",
                 argv[0], argv[0]);
    return 2;
  }
  const std::string mode = argv[1], dir = argv[2];
  const int threads = std::stoi(arg(argc, argv, "--threads", "0"));
  if (threads > 0) k3::set_num_threads(threads);
  const int runs = std::stoi(arg(argc, argv, "--runs", mode == "verify" ? "5" : "3"));
  const std::string trunk = arg(argc, argv, "--trunk-type", "bf16");
  if (trunk == "q8") g_trunk = k3::QuantKind::Q8;
  else if (trunk == "q4") g_trunk = k3::QuantKind::Q4;
  else if (trunk != "bf16") throw k3::Error("--trunk-type: expected bf16, q8 or q4, found '" + trunk + "'");
  std::printf("numerics %s | trunk %s\n", k3::numerics_name(k3::numerics_mode()), trunk.c_str());
  if (mode == "verify") {
    bench_verify(dir, std::stoll(arg(argc, argv, "--ctx", "64")), std::stoll(arg(argc, argv, "--kmax", "8")), runs);
  } else if (mode == "accept") {
    std::vector<int64_t> ks;
    std::stringstream kl(arg(argc, argv, "--kmax-list", "2,4,8"));
    for (std::string x; std::getline(kl, x, ',');) ks.push_back(std::stoll(x));
    bench_accept(dir, arg(argc, argv, "--draft", ""), arg(argc, argv, "--text", (dir + "/heldout.txt").c_str()),
                 std::stoll(arg(argc, argv, "--n", "128")), runs, ks);
  } else if (mode == "loop") {
    std::vector<int64_t> ks;
    std::stringstream kl(arg(argc, argv, "--kmax-list", "4,8"));
    for (std::string x; std::getline(kl, x, ',');) ks.push_back(std::stoll(x));
    bench_loop(dir, std::stoll(arg(argc, argv, "--n", "32")), runs, ks);
  } else {
    throw k3::Error("mode: expected verify, accept or loop, found '" + mode + "'");
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "k3_bench_speculative: %s\n", e.what());
  return 1;
}
