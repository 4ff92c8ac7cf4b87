// Error of each numerics mode (kernels/numerics.h) against the exact mode on one text:
// held-out perplexity (next-token NLL over the same positions), per-position logits rel-L2 (mean,
// max) and top-1 agreement (argmax equal to the exact mode's). The whole text teacher-forced in
// one pass (prefill chunks of 256), fast kernels. Rows: exact, int8, mxfp8, bf16 (= bf16 trunk +
// int8 experts), and two mixes.
//
//   k3_bench_numerics_error -m models/k3-mini -f models/k3-mini/heldout.txt [--tokens 100000]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/read_file.h"
#include "io/checkpoint.h"
#include "kernels/numerics.h"
#include "kernels/ops.h"
#include "model/k3_model.h"
#include "tokenizer/tokenizer.h"
#include "tools/exec_env.h"

namespace {

double perplexity(const std::vector<float>& logits, const std::vector<int32_t>& ids, int64_t n_vocab) {
  double nll = 0;
  int64_t n = 0;
  for (size_t t = 0; t + 1 < ids.size(); ++t) {
    const float* l = logits.data() + t * n_vocab;
    const double mx = *std::max_element(l, l + n_vocab);
    double z = 0;
    for (int64_t v = 0; v < n_vocab; ++v) z += std::exp(static_cast<double>(l[v]) - mx);
    nll += -(static_cast<double>(l[ids[t + 1]]) - mx - std::log(z));
    ++n;
  }
  return std::exp(nll / static_cast<double>(n));
}

}  // namespace

int main(int argc, char** argv) {
  k3tools::exec_config({}, k3::Numerics::Exact, 0);  // K3_ISA / K3_NUMERICS / K3_MXFP4 / K3_KERNELS
  CLI::App app{"numerics modes' error vs the exact mode"};
  std::string dir, file;
  int64_t n_tokens = 100000;
  app.add_option("-m,--model", dir, "checkpoint directory")->required();
  app.add_option("-f,--file", file, "text to score")->required();
  app.add_option("--tokens", n_tokens, "tokens of the text used")->check(CLI::Range(2, 1 << 20));
  CLI11_PARSE(app, argc, argv);
  try {
    auto ck = k3::Checkpoint::open(dir);
    const int64_t n_vocab = ck->config().vocab_size;
    const k3::Tokenizer tok = k3::Tokenizer::load(dir);
    k3::ReadLimits lim;
    std::vector<int32_t> ids = tok.encode(k3::read_file_bounded(file, "-f/--file", lim));
    if (static_cast<int64_t>(ids.size()) > n_tokens) ids.resize(static_cast<size_t>(n_tokens));
    const int64_t T = static_cast<int64_t>(ids.size());
    auto run = [&](k3::Numerics n, std::optional<k3::Mxfp4Path> experts) {
      k3::ModelOptions mo;
      mo.exec.numerics = n;
      mo.exec.mxfp4 = experts ? *experts : k3::numerics_mxfp4_path(n);
      const k3::Model m(*ck, mo);
      auto s = m.new_sequence();
      return m.forward(s, ids, true);
    };
    const std::vector<float> exact = run(k3::Numerics::Exact, k3::Mxfp4Path::ExactF32);
    std::printf(
        "%s: %lld tokens, ISA-dispatched fast kernels\n\n"
        "| mode | trunk activations | experts | perplexity | logits rel-L2 vs exact: mean | max | top-1 agreement |\n"
        "|---|---|---|---|---|---|---|\n",
        dir.c_str(), static_cast<long long>(T));
    struct Row {
      const char* name;
      k3::Numerics n;
      std::optional<k3::Mxfp4Path> experts;
    };
    const Row rows[] = {{"exact", k3::Numerics::Exact, k3::Mxfp4Path::ExactF32},
                        {"int8", k3::Numerics::Int8, std::nullopt},
                        {"mxfp8", k3::Numerics::Mxfp8, std::nullopt},
                        {"bf16", k3::Numerics::Bf16, std::nullopt},
                        {"(bf16 trunk + mxfp8 experts)", k3::Numerics::Bf16, k3::Mxfp4Path::Mxfp8},
                        {"(bf16 trunk + exact experts)", k3::Numerics::Bf16, k3::Mxfp4Path::ExactF32}};
    for (const Row& r : rows) {
      const std::vector<float> got =
          r.n == k3::Numerics::Exact && r.experts == k3::Mxfp4Path::ExactF32 ? exact : run(r.n, r.experts);
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
      const k3::Mxfp4Path ep = r.experts ? *r.experts : k3::numerics_mxfp4_path(r.n);
      std::printf("| %s | %s | %s | %.4f | %.2e | %.2e | %.2f%% |\n", r.name,
                  r.n == k3::Numerics::Bf16 ? "bf16" : "fp32", k3::mxfp4_path_name(ep), perplexity(got, ids, n_vocab),
                  sum / static_cast<double>(T), mx, 100.0 * static_cast<double>(agree) / static_cast<double>(T));
      std::fflush(stdout);
    }
  } catch (const k3::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
