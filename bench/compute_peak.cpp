// k3_bench_compute_peak — the machine's fp32 FMA peak (the compute roofline that prefill is
// compared with in docs/performance.md): 12 independent FMA chains per thread in registers, for
// 1..N threads, AVX2 + FMA (and AVX-512 where the CPU has it). Median of --runs runs.
//   k3_bench_compute_peak [--runs 5]
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/threads.h"
#include "tools/exec_env.h"

namespace {

constexpr long kIters = 50'000'000;

// 12 independent chains in named registers (an array of vectors is not reliably kept in
// registers), each iteration 12 FMAs; returns a value that depends on every chain.
// clang-format off
#define K3_CHAINS(T, SET, FMA, ADD, CONS)                                                        \
  T a0 = SET(1.0f), a1 = SET(1.001f), a2 = SET(1.002f), a3 = SET(1.003f), a4 = SET(1.004f),     \
    a5 = SET(1.005f), a6 = SET(1.006f), a7 = SET(1.007f), a8 = SET(1.008f), a9 = SET(1.009f),   \
    a10 = SET(1.010f), a11 = SET(1.011f);                                                        \
  const T b = SET(0.9999999f), c = SET(1e-7f);                                                   \
  for (long it = 0; it < kIters; ++it) {                                                         \
    a0 = FMA(a0, b, c); a1 = FMA(a1, b, c); a2 = FMA(a2, b, c); a3 = FMA(a3, b, c);              \
    a4 = FMA(a4, b, c); a5 = FMA(a5, b, c); a6 = FMA(a6, b, c); a7 = FMA(a7, b, c);              \
    a8 = FMA(a8, b, c); a9 = FMA(a9, b, c); a10 = FMA(a10, b, c); a11 = FMA(a11, b, c);          \
    __asm__ volatile("" : CONS(a0), CONS(a1), CONS(a2), CONS(a3), CONS(a4), CONS(a5), CONS(a6),  \
                     CONS(a7), CONS(a8), CONS(a9), CONS(a10), CONS(a11));                        \
  }                                                                                              \
  const T s = ADD(ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7))),             \
                  ADD(ADD(a8, a9), ADD(a10, a11)));
// clang-format on

#define K3_X(v) "+x"(v)
#define K3_V(v) "+v"(v)

__attribute__((target("avx2,fma"))) float chains_avx2() {
  K3_CHAINS(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, K3_X)
  return _mm256_cvtss_f32(s);
}

__attribute__((target("avx512f"))) float chains_avx512() {
  K3_CHAINS(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, K3_V)
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  return lanes[0];
}

// GFLOP/s of `threads` concurrent copies of fn (each 12 chains x lanes x 2 flops per iteration).
double run(int threads, float (*fn)(), int lanes) {
  k3::set_num_threads(threads);
  std::atomic<float> sink{0};
  const auto t0 = std::chrono::steady_clock::now();
  k3::parallel_for(threads, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sink.store(sink.load() + fn());
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return threads * 12.0 * lanes * 2.0 * kIters / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  k3tools::exec_config({}, k3::Numerics::Exact, 0);  // K3_ISA / K3_NUMERICS / K3_MXFP4 / K3_KERNELS
  int runs = 5;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--runs") runs = std::max(1, std::atoi(argv[i + 1]));
  const int max_t = k3::num_threads();
  const k3::CpuFeatures& f = k3::cpu_features();
  std::printf("fp32 FMA peak, median of %d runs\n\n| ISA | threads | GFLOP/s |\n|---|---|---|\n", runs);
  struct Isa {
    const char* name;
    bool ok;
    float (*fn)();
    int lanes;
  };
  for (const Isa& isa : {Isa{"avx2+fma", f.avx2, chains_avx2, 8}, Isa{"avx512f", f.avx512f, chains_avx512, 16}}) {
    if (!isa.ok) {
      std::printf("| %s | - | not supported on this CPU |\n", isa.name);
      continue;
    }
    for (int t = 1; t <= max_t; ++t) {
      std::vector<double> g;
      for (int r = 0; r < runs; ++r) g.push_back(run(t, isa.fn, isa.lanes));
      std::sort(g.begin(), g.end());
      std::printf("| %s | %d | %.1f |\n", isa.name, t, g[g.size() / 2]);
      std::fflush(stdout);
    }
  }
  return 0;
}
