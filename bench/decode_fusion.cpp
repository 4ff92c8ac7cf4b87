// k3_bench_decode_fusion — one decode step's projections of one input at K3's widths:
// KDA's q/k/v/g [12288, 7168] + f_a [128, 7168] + b [96, 7168] (705 MB of bf16), T = 1, either one
// k3::matmul per weight (one parallel region and barrier each) or one ops.h matmul_same_input
// (one region for all six; the same bits). The two forms alternate sample by sample in one
// process, so a shared machine's load drift hits both alike; medians of --samples each, GB/s of
// weights read, for 1..N threads.   k3_bench_decode_fusion [--samples 15]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/dispatch.h"
#include "kernels/ops.h"
#include "kernels/threads.h"
#include "tools/exec_env.h"

namespace {
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) try {
  k3tools::exec_config({}, k3::Numerics::Exact, 0);  // K3_ISA / K3_NUMERICS / K3_MXFP4 / K3_KERNELS
  int samples = 15;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--samples") samples = std::max(1, std::atoi(argv[i + 1]));
  const int64_t D = 7168;
  const std::vector<int64_t> rows = {12288, 12288, 12288, 128, 96, 12288};  // q k v f_a b g
  const char* names[6] = {"q_proj", "k_proj", "v_proj", "f_a_proj", "b_proj", "g_proj"};
  std::mt19937 rng(1);
  std::vector<std::vector<uint16_t>> w(rows.size());
  std::vector<k3::TensorView> v(rows.size());
  double bytes = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    w[i].resize(static_cast<size_t>(rows[i] * D));
    for (auto& b : w[i]) b = static_cast<uint16_t>(0x3c00 + (rng() & 0x7f) + ((rng() & 1) << 15));
    v[i].name = names[i];
    v[i].dtype = k3::DType::BF16;
    v[i].shape = {rows[i], D};
    v[i].data = reinterpret_cast<const uint8_t*>(w[i].data());
    v[i].nbytes = static_cast<uint64_t>(rows[i] * D * 2);
    bytes += static_cast<double>(v[i].nbytes);
  }
  std::vector<float> x(D);
  for (auto& e : x) e = static_cast<float>(rng() % 1000) / 1000.0f - 0.5f;
  std::vector<std::vector<float>> y(rows.size());
  std::vector<float*> ys;
  std::vector<const k3::TensorView*> ws;
  for (size_t i = 0; i < rows.size(); ++i) {
    y[i].resize(static_cast<size_t>(rows[i]));
    ys.push_back(y[i].data());
    ws.push_back(&v[i]);
  }
  const int max_t = k3::num_threads();
  std::printf(
      "ISA %s; KDA projections of one token, %.0f MB of bf16; medians of %d alternating samples\n\n"
      "| threads | one matmul per weight ms | GB/s | matmul_same_input ms | GB/s | speed-up |\n|---|---|---|---|---|---|\n",
      k3::isa_name(k3::active_isa()), bytes / 1e6, samples);
  for (int t = 1; t <= max_t; ++t) {
    k3::set_num_threads(t);
    std::vector<double> a, b;
    for (int s = 0; s <= samples; ++s) {  // s == 0: warm-up of both forms
      double t0 = now_s();
      for (size_t i = 0; i < rows.size(); ++i) k3::matmul(v[i], x.data(), 1, y[i].data());
      const double ta = now_s() - t0;
      t0 = now_s();
      k3::matmul_same_input(ws, x.data(), 1, ys);
      const double tb = now_s() - t0;
      if (s > 0) {
        a.push_back(ta);
        b.push_back(tb);
      }
    }
    const double ma = median(a), mb = median(b);
    std::printf("| %d | %.2f | %.2f | %.2f | %.2f | %.3fx |\n", t, 1e3 * ma, bytes / ma / 1e9, 1e3 * mb,
                bytes / mb / 1e9, ma / mb);
    std::fflush(stdout);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "k3_bench_decode_fusion: %s\n", e.what());
  return 1;
}
