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

namespace {

constexpr long kIters = 50'000'000;

// Returns a value that depends on every chain (so nothing is optimised away).
__attribute__((target("avx2,fma"))) float chains_avx2() {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(1.0f + 1e-3f * static_cast<float>(i));
  const __m256 b = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
  for (long it = 0; it < kIters; ++it) {
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], b, c);
    __asm__ volatile("" : "+x"(a[0]), "+x"(a[1]), "+x"(a[2]), "+x"(a[3]), "+x"(a[4]), "+x"(a[5]),
                     "+x"(a[6]), "+x"(a[7]), "+x"(a[8]), "+x"(a[9]), "+x"(a[10]), "+x"(a[11]));
  }
  __m256 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, a[i]);
  return _mm256_cvtss_f32(s);
}

__attribute__((target("avx512f"))) float chains_avx512() {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(1.0f + 1e-3f * static_cast<float>(i));
  const __m512 b = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < kIters; ++it) {
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], b, c);
    __asm__ volatile("" : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]), "+v"(a[4]), "+v"(a[5]),
                     "+v"(a[6]), "+v"(a[7]), "+v"(a[8]), "+v"(a[9]), "+v"(a[10]), "+v"(a[11]));
  }
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  float t = 0;
  for (float v : lanes) t += v;
  return t;
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
