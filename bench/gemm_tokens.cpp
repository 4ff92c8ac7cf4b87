// k3_bench_gemm_tokens — the weight GEMMs of batched decode: time of one product with a K3-width
// weight for T = 1, 2, 4, ... tokens (T = concurrent streams in a decode step), as GB/s of weight
// read and GFLOP/s. Decode batching pays while the time stays near the T = 1 (bandwidth) time.
//   k3_bench_gemm_tokens [--tokens 1,2,4,8,16,32] [--reps 5] [--threads N]
// Shapes: bf16 KDA q_proj [12288, 7168] (176 MB) and 24 distinct MXFP4 expert w1 [3072, 3584]
// (int8 path, 140 MB) so DRAM, not cache, is read.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/dispatch.h"
#include "kernels/ops.h"
#include "kernels/threads.h"

#if defined(__x86_64__)
#include "kernels/avx512/avx512_kernels.h"
#include "tools/exec_env.h"
#endif

namespace {
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) try {
  k3tools::exec_config({}, k3::Numerics::Exact, 0);  // K3_ISA / K3_NUMERICS / K3_MXFP4 / K3_KERNELS
  std::vector<int64_t> tokens = {1, 2, 4, 8, 16, 32};
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--tokens") {
      tokens.clear();
      std::stringstream ss(v);
      std::string it;
      while (std::getline(ss, it, ',')) tokens.push_back(std::stoll(it));
    } else if (a == "--reps") reps = std::stoi(v);
    else if (a == "--threads") k3::set_num_threads(std::stoi(v));
    else throw k3::Error("unknown flag " + a);
  }
  std::mt19937 rng(1);
  const int64_t rows = 12288, cols = 7168;
  std::vector<uint16_t> w(static_cast<size_t>(rows * cols));
  for (auto& b : w) b = static_cast<uint16_t>(0x3c00 + (rng() & 0x7f) + ((rng() & 1) << 15));
  const int64_t E = 24, e_rows = 3072, e_cols = 3584;
  std::vector<uint8_t> packed(static_cast<size_t>(E * e_rows * e_cols / 2)),
      scale(static_cast<size_t>(E * e_rows * e_cols / 32));
  for (auto& b : packed) b = static_cast<uint8_t>(rng());
  for (auto& b : scale) b = static_cast<uint8_t>(118 + rng() % 3);
  const int64_t Tmax = *std::max_element(tokens.begin(), tokens.end());
  std::vector<float> x(static_cast<size_t>(Tmax * cols)), y(static_cast<size_t>(Tmax * rows));
  for (auto& v : x) v = static_cast<float>(rng() % 1000) / 1000.0f - 0.5f;
  std::printf("ISA %s | threads %d\n", k3::isa_name(k3::active_isa()), k3::num_threads());
  // On AVX-512 CPUs the previous MXFP4 kernel (per-row VNNI, k3::avx512::gemm_mxfp4_q8_rowwise) is
  // timed in the same loop, single call per matrix and row range as the dispatched one (1 thread).
  const bool prev = k3::active_isa() == k3::Isa::Avx512;
  std::printf(
      "| T | bf16 [12288,7168] ms | GB/s | GFLOP/s | MXFP4 24x[3072,3584] ms | GB/s | GFLOP/s |%s\n|---:|---:|---:|---:|---:|---:|---:|%s\n",
      prev ? " previous AVX-512 MXFP4 ms (1 thread) |" : "", prev ? "---:|" : "");
  k3::Q8Activations xq;
  for (int64_t T : tokens) {
    std::vector<double> tb, tm, tp;
    for (int r = 0; r < reps; ++r) {
      double t0 = now_s();
      k3::matmul_bf16_raw(w.data(), rows, cols, cols, x.data(), T, y.data(), "bench");
      tb.push_back(now_s() - t0);
      t0 = now_s();
      for (int64_t e = 0; e < E; ++e) {
        k3::Mxfp4Matrix m{packed.data() + e * e_rows * e_cols / 2, scale.data() + e * e_rows * e_cols / 32, e_rows,
                          e_cols};
        k3::matmul_mxfp4(m, x.data(), T, y.data(), k3::Mxfp4Path::Int8, "bench");
      }
      tm.push_back(now_s() - t0);
#if defined(__x86_64__)
      if (prev) {
        k3::quantize_q8(x.data(), T, e_cols, xq);
        t0 = now_s();
        for (int64_t e = 0; e < E; ++e)
          k3::avx512::gemm_mxfp4_q8_rowwise(packed.data() + e * e_rows * e_cols / 2,
                                            scale.data() + e * e_rows * e_cols / 32, e_cols, xq.q.data(), xq.s.data(),
                                            T, y.data(), e_rows, 0, e_rows);
        tp.push_back(now_s() - t0);
      }
#endif
    }
    const double b = median(tb), m = median(tm);
    const double wb = static_cast<double>(rows * cols * 2),
                 wm = static_cast<double>(E * e_rows * e_cols) * (0.5 + 1.0 / 32);
    std::printf("| %lld | %.2f | %.1f | %.1f | %.2f | %.1f | %.1f |", static_cast<long long>(T), b * 1e3, wb / b / 1e9,
                2.0 * rows * cols * T / b / 1e9, m * 1e3, wm / m / 1e9, 2.0 * E * e_rows * e_cols * T / m / 1e9);
    if (prev) std::printf(" %.2f |", median(tp) * 1e3);
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "k3_bench_gemm_tokens: %s\n", e.what());
  return 1;
}
