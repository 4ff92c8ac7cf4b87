// Error of the trunk quantized at load (`--trunk-type q8|q4`) against the exact BF16
// trunk, on one text: per-position logits rel-L2 (mean, max), top-1 agreement, and the perplexity
// of the text under each (next-token NLL over the same positions).
//
//   k3_bench_trunk_quant_error -m models/k3-mini -f models/k3-mini/heldout.txt [--tokens 1024]
//   k3_bench_trunk_quant_error -m DIR --random-ids 64        (tiny checkpoints: random ids)
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/read_file.h"
#include "io/checkpoint.h"
#include "model/k3_model.h"
#include "tokenizer/tokenizer.h"
#include "tools/exec_env.h"

namespace {

struct Score {
  double nll = 0;
  int64_t n = 0;
};

Score score(const std::vector<float>& logits, const std::vector<int32_t>& ids, int64_t n_vocab) {
  Score s;
  for (size_t t = 0; t + 1 < ids.size(); ++t) {
    const float* l = logits.data() + t * n_vocab;
    const double mx = *std::max_element(l, l + n_vocab);
    double z = 0;
    for (int64_t v = 0; v < n_vocab; ++v) z += std::exp(static_cast<double>(l[v]) - mx);
    s.nll += -(static_cast<double>(l[ids[t + 1]]) - mx - std::log(z));
    ++s.n;
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  k3tools::exec_config({}, k3::Numerics::Exact, 0);  // K3_ISA / K3_NUMERICS / K3_MXFP4 / K3_KERNELS
  CLI::App app{"trunk quantization error vs the exact BF16 trunk"};
  std::string dir, file;
  int64_t n_tokens = 1024, random_ids = 0;
  app.add_option("-m,--model", dir, "checkpoint directory")->required();
  app.add_option("-f,--file", file, "text to score");
  app.add_option("--tokens", n_tokens, "tokens of the text used")->check(CLI::Range(2, 1 << 20));
  app.add_option("--random-ids", random_ids, "score this many random ids instead of a text")
      ->check(CLI::Range(0, 1 << 20));
  CLI11_PARSE(app, argc, argv);
  try {
    auto ck = k3::Checkpoint::open(dir);
    const int64_t n_vocab = ck->config().vocab_size;
    std::vector<int32_t> ids;
    if (random_ids > 0) {
      std::mt19937 rng(7);
      for (int64_t i = 0; i < random_ids; ++i)
        ids.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab)));
    } else {
      if (file.empty()) throw k3::Error("give -f FILE or --random-ids N");
      const k3::Tokenizer tok = k3::Tokenizer::load(dir);
      k3::ReadLimits lim;
      ids = tok.encode(k3::read_file_bounded(file, "-f/--file", lim));
      if (static_cast<int64_t>(ids.size()) > n_tokens) ids.resize(static_cast<size_t>(n_tokens));
    }
    const int64_t T = static_cast<int64_t>(ids.size());
    auto run = [&](std::optional<k3::QuantKind> q) {
      k3::ModelOptions mo;
      mo.trunk_quant = q;
      const k3::Model m(*ck, mo);
      auto s = m.new_sequence();
      return m.forward(s, ids, true);
    };
    const std::vector<float> exact = run(std::nullopt);
    const Score se = score(exact, ids, n_vocab);
    std::printf(
        "%s: %lld tokens%s\n\n| trunk | perplexity | logits rel-L2 mean | max | top-1 agreement |\n|---|---|---|---|---|\n",
        dir.c_str(), static_cast<long long>(T), random_ids > 0 ? " (random ids)" : "");
    std::printf("| bf16 (exact) | %.4f | 0 | 0 | 100%% |\n", std::exp(se.nll / static_cast<double>(se.n)));
    for (k3::QuantKind q : {k3::QuantKind::Q8, k3::QuantKind::Q4}) {
      const std::vector<float> got = run(q);
      double sum = 0, mx = 0;
      int64_t agree = 0;
      for (int64_t t = 0; t < T; ++t) {
        const float* a = got.data() + t * n_vocab;
        const float* b = exact.data() + t * n_vocab;
        double num = 0, den = 0;
        for (int64_t v = 0; v < n_vocab; ++v) {
          num += (static_cast<double>(a[v]) - b[v]) * (static_cast<double>(a[v]) - b[v]);
          den += static_cast<double>(b[v]) * b[v];
        }
        const double e = std::sqrt(num / std::max(den, 1e-300));
        sum += e;
        mx = std::max(mx, e);
        agree += std::max_element(a, a + n_vocab) - a == std::max_element(b, b + n_vocab) - b;
      }
      const Score sq = score(got, ids, n_vocab);
      std::printf("| %s | %.4f | %.2e | %.2e | %.1f%% |\n", q == k3::QuantKind::Q8 ? "q8" : "q4",
                  std::exp(sq.nll / static_cast<double>(sq.n)), sum / static_cast<double>(T), mx,
                  100.0 * static_cast<double>(agree) / static_cast<double>(T));
    }
  } catch (const k3::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
