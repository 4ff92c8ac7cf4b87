// k3_bench_kernels — speed of the dispatched CPU kernels per ISA and thread count, against the
// built-in streaming read probe. A benchmark, not a test: prints a markdown table.
//
//   k3_bench_kernels [--reps N] [--threads 1,2] [--probe-mb 1024] [--isa scalar,avx2,avx512]
//                    [--gemm-only | --mxfp4-only]
//
// Shapes are K3's real widths: bf16 GEMV on a KDA q_proj [12288, 7168] (176 MB, decode),
// bf16 GEMM with 64 tokens on [3072, 7168] (prefill chunk), MXFP4 matvec over 24 distinct expert
// w1 matrices [3072, 3584] (140 MB, so DRAM not cache is read), MXFP4 GEMM with 16 tokens.
//
// Then (AVX2 CPUs; --gemm-only runs just this) a single-thread prefill GEMM table: the AVX2 bf16
// GEMM's "row-dot" kernel (the previous version, 4 rows x 3 tokens + horizontal sums) against its
// "panel" kernel (packed [cols][16] fp32 panel, broadcast X, 16 rows x 6 tokens) and the dispatched
// k3::avx2::gemm_bf16, on K3-mini shapes and one K3 shape; interleaved samples, medians. Then the
// AVX2 MXFP4 Q8 GEMM: the previous row-wise kernel against the dispatched 8-row-tile kernel on
// K3-mini and K3 expert shapes (--mxfp4-only runs just this table).
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/dispatch.h"
#include "kernels/read_bandwidth.h"
#include "kernels/threads.h"
#include "tools/exec_env.h"

// Defined in src/kernels/avx2/gemm_bf16.cpp (the two paths of k3::avx2::gemm_bf16; contract as
// KernelTable::gemm_bf16). Only called when the CPU has AVX2 + FMA.
namespace k3::avx2 {
void gemm_bf16(const uint16_t* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t t, float* y, int64_t ldy,
               int64_t r0, int64_t r1);
void gemm_bf16_rowdot(const uint16_t* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t t, float* y,
                      int64_t ldy, int64_t r0, int64_t r1);
void gemm_bf16_panel(const uint16_t* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t t, float* y,
                     int64_t ldy, int64_t r0, int64_t r1);
// src/kernels/avx2/mxfp4.cpp: the dispatched Q8 kernel (8-row tiles) and the previous row-wise one
// (contract as KernelTable::gemm_mxfp4_q8).
void gemm_mxfp4_q8(const uint8_t* packed, const uint8_t* scale, int64_t k, const int8_t* q, const float* qs, int64_t t,
                   float* y, int64_t ldy, int64_t r0, int64_t r1);
void gemm_mxfp4_q8_rowwise(const uint8_t* packed, const uint8_t* scale, int64_t k, const int8_t* q, const float* qs,
                           int64_t t, float* y, int64_t ldy, int64_t r0, int64_t r1);
}  // namespace k3::avx2

namespace {

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// CPU share of the last median_seconds call: process CPU time / (wall time x threads). Shows how
// much of the cores the benchmark actually got on a shared machine (spin-waits count as busy).
double g_cpu_share = 0;

double median_seconds(int reps, const std::function<void()>& fn) {
  fn();  // warm-up (page faults, caches, thread pool)
  std::vector<double> t;
  const double c0 = process_cpu_seconds();
  const auto w0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  g_cpu_share = (process_cpu_seconds() - c0) / (wall * k3::num_threads());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) v.push_back(x);
  return v;
}

void fill_bf16(std::vector<uint16_t>& w, uint32_t seed) {
  uint32_t r = seed;
  for (auto& h : w) {
    r = r * 1664525u + 1013904223u;
    h = static_cast<uint16_t>(0x3C00u | ((r >> 16) & 0x80FFu));  // |w| in [2^-7, 2^-6), random sign
  }
}
void fill_u8(std::vector<uint8_t>& v, uint32_t seed, int lo, int span) {
  uint32_t r = seed;
  for (auto& b : v) {
    r = r * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(span >= 256 ? (r >> 24) : lo + (r >> 24) % span);
  }
}

using GemmFn = void (*)(const uint16_t*, int64_t, int64_t, const float*, int64_t, int64_t, float*, int64_t, int64_t,
                        int64_t);

// Single-thread GFLOP/s of the AVX2 bf16 GEMM paths on prefill shapes: each sample repeats the
// call until it lasts >= 2 ms; samples of the kernels alternate; median of `reps` samples.
void gemm_paths_table(int reps) {
  struct Shape {
    int64_t rows, k, t;
    const char* what;
  };
  const Shape shapes[] = {
      {128, 128, 64, "mini q/o"},      {128, 128, 256, "mini q/o"},      {384, 128, 64, "mini qkv"},
      {384, 128, 256, "mini qkv"},     {128, 384, 64, "mini down"},      {128, 384, 256, "mini down"},
      {64, 128, 64, "mini latent"},    {16, 128, 64, "mini router"},     {256, 128, 256, "mini up"},
      {384, 128, 2, "threshold"},      {384, 128, 3, "threshold"},       {384, 128, 4, "threshold"},
      {384, 128, 6, "threshold"},      {384, 128, 8, "threshold"},       {384, 128, 16, "threshold"},
      {128, 384, 3, "threshold"},      {128, 384, 4, "threshold"},       {3072, 7168, 4, "K3 threshold"},
      {3072, 7168, 8, "K3 threshold"}, {3072, 7168, 12, "K3 threshold"}, {3072, 7168, 16, "K3 threshold"},
      {3072, 7168, 64, "K3 prefill"},  {12288, 7168, 1, "K3 decode"},
  };
  struct Path {
    const char* name;
    GemmFn fn;
  };
  const Path paths[] = {{"rowdot (previous)", k3::avx2::gemm_bf16_rowdot},
                        {"panel", k3::avx2::gemm_bf16_panel},
                        {"gemm_bf16 (dispatched)", k3::avx2::gemm_bf16}};
  constexpr int kPaths = 3;
  std::printf("\nAVX2 bf16 GEMM paths, 1 thread, median of %d samples (GFLOP/s)\n\n", reps);
  std::printf("| shape [rows,cols] | T | what | rowdot (previous) | panel | dispatched | panel/rowdot |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  std::mt19937 g(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (const Shape& s : shapes) {
    std::vector<uint16_t> w(s.rows * s.k);
    fill_bf16(w, 11);
    std::vector<float> x(s.t * s.k), y(s.t * s.rows);
    for (auto& v : x) v = dist(g);
    const double flops = 2.0 * s.rows * s.k * s.t;
    auto call = [&](GemmFn fn) { fn(w.data(), s.k, s.k, x.data(), s.k, s.t, y.data(), s.rows, 0, s.rows); };
    // calibrate: iterations per sample so one sample lasts >= 2 ms (with the slowest path)
    int64_t iters = 1;
    for (const Path& p : paths) {
      call(p.fn);
      const auto t0 = std::chrono::steady_clock::now();
      call(p.fn);
      const double one = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      iters = std::max<int64_t>(iters, static_cast<int64_t>(2e-3 / std::max(one, 1e-9)) + 1);
    }
    std::vector<double> samples[kPaths];
    for (int r = 0; r < reps; ++r)
      for (int i = 0; i < kPaths; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t it = 0; it < iters; ++it) call(paths[i].fn);
        samples[i].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters);
      }
    double gf[kPaths];
    for (int i = 0; i < kPaths; ++i) {
      std::sort(samples[i].begin(), samples[i].end());
      gf[i] = flops / samples[i][samples[i].size() / 2] / 1e9;
    }
    std::printf("| [%lld,%lld] | %lld | %s | %.1f | %.1f | %.1f | %.2fx |\n", static_cast<long long>(s.rows),
                static_cast<long long>(s.k), static_cast<long long>(s.t), s.what, gf[0], gf[1], gf[2], gf[1] / gf[0]);
    std::fflush(stdout);
  }
}

using Mxfp4Q8Fn = void (*)(const uint8_t*, const uint8_t*, int64_t, const int8_t*, const float*, int64_t, float*,
                           int64_t, int64_t, int64_t);

// Single-thread GOP/s (2·rows·cols·T) of the AVX2 MXFP4 Q8 GEMM: the previous row-wise kernel against
// the dispatched 8-row-tile kernel, on K3-mini expert shapes and K3 expert shapes; same sampling
// as gemm_paths_table.
void mxfp4_paths_table(int reps) {
  struct Shape {
    int64_t rows, k, t;
    const char* what;
  };
  const Shape shapes[] = {
      {64, 64, 1, "mini expert"},   {64, 64, 16, "mini expert"},  {64, 64, 64, "mini expert"},
      {64, 64, 128, "mini expert"}, {3072, 3584, 1, "K3 w1/w3"},  {3072, 3584, 2, "K3 w1/w3"},
      {3072, 3584, 3, "K3 w1/w3"},  {3072, 3584, 4, "K3 w1/w3"},  {3072, 3584, 6, "K3 w1/w3"},
      {3072, 3584, 16, "K3 w1/w3"}, {3072, 3584, 64, "K3 w1/w3"}, {3584, 3072, 16, "K3 w2"},
      {3584, 3072, 64, "K3 w2"},
  };
  const Mxfp4Q8Fn paths[] = {k3::avx2::gemm_mxfp4_q8_rowwise, k3::avx2::gemm_mxfp4_q8};
  constexpr int kPaths = 2;
  std::printf("\nAVX2 MXFP4 Q8 GEMM, 1 thread, median of %d samples (GOP/s)\n\n", reps);
  std::printf("| shape [rows,cols] | T | what | rowwise (previous) | row tiles (dispatched) | new/old |\n");
  std::printf("|---|---|---|---|---|---|\n");
  const k3::KernelTable& kt = k3::kernels_for(k3::Isa::Avx2);
  std::mt19937 g(9);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (const Shape& s : shapes) {
    const int64_t nb = s.k / 32;
    std::vector<uint8_t> packed(s.rows * s.k / 2), scale(s.rows * nb);
    fill_u8(packed, 4, 0, 256);
    fill_u8(scale, 5, 120, 8);
    std::vector<float> x(s.t * s.k), qs(s.t * nb), y(s.t * s.rows);
    std::vector<int8_t> q(s.t * s.k);
    for (auto& v : x) v = dist(g);
    for (int64_t j = 0; j < s.t; ++j) kt.quantize_q8(x.data() + j * s.k, s.k, q.data() + j * s.k, qs.data() + j * nb);
    const double ops = 2.0 * s.rows * s.k * s.t;
    auto call = [&](Mxfp4Q8Fn fn) {
      fn(packed.data(), scale.data(), s.k, q.data(), qs.data(), s.t, y.data(), s.rows, 0, s.rows);
    };
    int64_t iters = 1;
    for (Mxfp4Q8Fn fn : paths) {
      call(fn);
      const auto t0 = std::chrono::steady_clock::now();
      call(fn);
      const double one = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      iters = std::max<int64_t>(iters, static_cast<int64_t>(2e-3 / std::max(one, 1e-9)) + 1);
    }
    std::vector<double> samples[kPaths];
    for (int r = 0; r < reps; ++r)
      for (int i = 0; i < kPaths; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t it = 0; it < iters; ++it) call(paths[i]);
        samples[i].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters);
      }
    double gops[kPaths];
    for (int i = 0; i < kPaths; ++i) {
      std::sort(samples[i].begin(), samples[i].end());
      gops[i] = ops / samples[i][samples[i].size() / 2] / 1e9;
    }
    std::printf("| [%lld,%lld] | %lld | %s | %.1f | %.1f | %.2fx |\n", static_cast<long long>(s.rows),
                static_cast<long long>(s.k), static_cast<long long>(s.t), s.what, gops[0], gops[1], gops[1] / gops[0]);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) try {
  k3tools::exec_config({}, k3::Numerics::Exact, 0);  // K3_ISA / K3_NUMERICS / K3_MXFP4 / K3_KERNELS
  int reps = 5;
  std::vector<int> threads{1, std::max(1, k3::num_threads())};
  uint64_t probe_mb = 1024;
  std::vector<k3::Isa> isas = k3::supported_isas();
  bool gemm_only = false, mxfp4_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw k3::Error("missing value after " + a);
      return argv[++i];
    };
    if (a == "--reps") reps = std::max(1, std::atoi(next().c_str()));
    else if (a == "--threads") {
      threads.clear();
      for (auto& s : split(next())) threads.push_back(std::max(1, std::atoi(s.c_str())));
    } else if (a == "--probe-mb") probe_mb = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--isa") {
      isas.clear();
      for (auto& s : split(next())) isas.push_back(k3::isa_from_name(s));
    } else if (a == "--gemm-only") gemm_only = true;
    else if (a == "--mxfp4-only") gemm_only = mxfp4_only = true;
    else throw k3::Error("unknown option " + a + " (see the comment at the top of bench/kernels.cpp)");
  }
  threads.erase(std::unique(threads.begin(), threads.end()), threads.end());
  const bool avx2 = k3::isa_supported(k3::Isa::Avx2);
  if (gemm_only) {
    if (!avx2) throw k3::Error("--gemm-only needs an AVX2 CPU");
    k3::set_num_threads(1);
    if (!mxfp4_only) gemm_paths_table(reps);
    mxfp4_paths_table(reps);
    return 0;
  }

  const int max_t = *std::max_element(threads.begin(), threads.end());
  k3::set_num_threads(max_t);
  const k3::ReadBandwidth bw = k3::measure_read_bandwidth(probe_mb << 20, 7);
  std::printf("read probe: %.2f GB/s median (best %.2f) over %.0f MiB in 2 MiB pages, %d threads, ISA %s\n\n", bw.median_gbs,
              bw.best_gbs, bw.bytes / 1048576.0, bw.threads, k3::isa_name(k3::active_isa()));

  // --- data ---
  const int64_t D = 7168, C = 12288, Im = 3072, L = 3584, TP = 64, TE = 16, NE = 24;
  std::vector<uint16_t> wq(C * D), wg(Im * D);
  fill_bf16(wq, 1);
  fill_bf16(wg, 2);
  std::mt19937 g(3);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> x(TP * D);
  for (auto& v : x) v = dist(g);
  std::vector<float> y(TP * C);
  std::vector<uint8_t> packed(NE * Im * L / 2), scale(NE * Im * L / 32);
  fill_u8(packed, 4, 0, 256);
  fill_u8(scale, 5, 120, 8);
  std::vector<int8_t> q(TE * L);
  std::vector<float> qs(TE * L / 32);

  std::printf("| kernel | shape | ISA | threads | median ms | GB/s | GFLOP/s | %% of probe | CPU share |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  auto row = [&](const char* kern, const char* shape, const k3::KernelTable& kt, int nt, double s, double bytes,
                 double flops) {
    std::printf("| %s | %s | %s | %d | %.2f | %.2f | %.1f | %.0f%% | %.0f%% |\n", kern, shape, kt.isa_name, nt, s * 1e3,
                bytes / s / 1e9, flops / s / 1e9, 100.0 * bytes / s / 1e9 / bw.median_gbs, 100.0 * g_cpu_share);
    std::fflush(stdout);
  };
  for (k3::Isa isa : isas) {
    const k3::KernelTable& kt = k3::kernels_for(isa);
    const int r = isa == k3::Isa::Scalar ? std::max(1, reps / 2) : reps;
    for (int nt : threads) {
      k3::set_num_threads(nt);
      double s = median_seconds(r, [&] {
        k3::parallel_for(
            C, 16, [&](int64_t a, int64_t b) { kt.gemm_bf16(wq.data(), D, D, x.data(), D, 1, y.data(), C, a, b); });
      });
      row("gemv_bf16", "[12288,7168] T=1", kt, nt, s, 2.0 * C * D, 2.0 * C * D);
      s = median_seconds(r, [&] {
        k3::parallel_for(
            Im, 16, [&](int64_t a, int64_t b) { kt.gemm_bf16(wg.data(), D, D, x.data(), D, TP, y.data(), Im, a, b); });
      });
      row("gemm_bf16", "[3072,7168] T=64", kt, nt, s, 2.0 * Im * D, 2.0 * Im * D * TP);
      s = median_seconds(r, [&] {
        kt.quantize_q8(x.data(), L, q.data(), qs.data());
        for (int64_t e = 0; e < NE; ++e)
          k3::parallel_for(Im, 16, [&](int64_t a, int64_t b) {
            kt.gemm_mxfp4_q8(packed.data() + e * Im * L / 2, scale.data() + e * Im * L / 32, L, q.data(), qs.data(), 1,
                             y.data(), Im, a, b);
          });
      });
      row("mxfp4_q8 matvec", "24x[3072,3584] T=1", kt, nt, s, NE * Im * L * 17.0 / 32, 2.0 * NE * Im * L);
      s = median_seconds(r, [&] {
        for (int64_t e = 0; e < NE; ++e)
          k3::parallel_for(Im, 16, [&](int64_t a, int64_t b) {
            kt.gemm_mxfp4_f32(packed.data() + e * Im * L / 2, scale.data() + e * Im * L / 32, L, x.data(), L, 1,
                              y.data(), Im, a, b);
          });
      });
      row("mxfp4_f32 matvec", "24x[3072,3584] T=1", kt, nt, s, NE * Im * L * 17.0 / 32, 2.0 * NE * Im * L);
      s = median_seconds(r, [&] {
        for (int64_t t = 0; t < TE; ++t) kt.quantize_q8(x.data() + t * L, L, q.data() + t * L, qs.data() + t * L / 32);
        k3::parallel_for(Im, 16, [&](int64_t a, int64_t b) {
          kt.gemm_mxfp4_q8(packed.data(), scale.data(), L, q.data(), qs.data(), TE, y.data(), Im, a, b);
        });
      });
      row("mxfp4_q8 gemm", "[3072,3584] T=16", kt, nt, s, Im * L * 17.0 / 32, 2.0 * Im * L * TE);
      s = median_seconds(r, [&] {
        k3::parallel_for(Im * TP, 4096, [&](int64_t a, int64_t b) {
          kt.situ_glu(x.data() + a, x.data() + TP * D - (b - a) - a % 7, y.data() + a, b - a, 4.f, 25.f);
        });
      });
      row("situ_glu", "196608 values", kt, nt, s, 12.0 * Im * TP, 0);
    }
  }
  if (avx2) {
    k3::set_num_threads(1);
    gemm_paths_table(reps);
    mxfp4_paths_table(reps);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "k3_bench_kernels: error: %s\n", e.what());
  return 1;
}
