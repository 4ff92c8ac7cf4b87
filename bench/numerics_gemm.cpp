// k3_bench_numerics_gemm — the prefill GEMMs of each numerics mode (kernels/numerics.h) at K3
// widths, per ISA, one thread, the kernel-table entry called directly (no ops threading), so
// the AVX2 and AVX-512 builds are compared on the same shapes in the same run.
//   k3_bench_numerics_gemm [--tokens 1,16,64,128,512] [--reps 5]
// Shapes: bf16 trunk W [3072, 7168] (KDA/MLA projections of K3's width: 44 MB) and an MXFP4
// expert w1 [3072, 3584] (K3's routed expert). Kernels per shape:
//   bf16:  fp32 (exact mode: bf16 weights widened, fp32 FMA), dp (bf16 mode: pair chain)
//   MXFP4: f32 (exact), q8 (int8 activations, VNNI on AVX-512), dp (mxfp8 mode: pair chain)
// GFLOP/s counts 2·rows·cols·T; activation rounding / quantization is not timed (O(T·cols)).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "kernels/dispatch.h"
#include "kernels/mxfp8.h"
#include "kernels/ops.h"
#include "tools/exec_env.h"

namespace {
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
template <class F>
double time_it(int reps, const F& f) {
  f();  // warm-up
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_s();
    f();
    t.push_back(now_s() - t0);
  }
  return median(t);
}
}  // namespace

int main(int argc, char** argv) try {
  k3tools::exec_config({}, k3::Numerics::Exact, 0);  // K3_ISA / K3_NUMERICS / K3_MXFP4 / K3_KERNELS
  std::vector<int64_t> tokens = {1, 16, 64, 128, 512};
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--tokens") {
      tokens.clear();
      std::stringstream ss(v);
      std::string it;
      while (std::getline(ss, it, ',')) tokens.push_back(std::stoll(it));
    } else if (a == "--reps") {
      reps = std::stoi(v);
    } else {
      throw k3::Error("unknown flag " + a);
    }
  }
  std::mt19937 rng(1);
  const int64_t rows = 3072, cols = 7168, e_rows = 3072, e_cols = 3584;
  std::vector<uint16_t> w(static_cast<size_t>(rows * cols));
  std::normal_distribution<float> nd(0.f, 0.02f);
  for (auto& b : w) b = k3::f32_to_bf16(nd(rng));
  std::vector<uint8_t> packed(static_cast<size_t>(e_rows * e_cols / 2)),
      scale(static_cast<size_t>(e_rows * e_cols / 32));
  for (auto& b : packed) b = static_cast<uint8_t>(rng());
  for (auto& b : scale) b = static_cast<uint8_t>(118 + rng() % 3);
  const int64_t Tmax = *std::max_element(tokens.begin(), tokens.end());
  std::vector<float> x(static_cast<size_t>(Tmax * cols)), y(static_cast<size_t>(Tmax * rows));
  for (auto& v : x) v = nd(rng) * 50.f;
  std::vector<uint16_t> xb(x.size()), xm(static_cast<size_t>(Tmax * e_cols));
  for (int64_t j = 0; j < Tmax; ++j) {
    k3::round_bf16_row(x.data() + j * cols, cols, xb.data() + j * cols);
    k3::quantize_mxfp8_bf16(x.data() + j * e_cols, e_cols, xm.data() + j * e_cols);
  }
  k3::Q8Activations xq;
  k3::quantize_q8(x.data(), Tmax, e_cols, xq);
  std::vector<float> xe(static_cast<size_t>(Tmax * e_cols));
  for (int64_t j = 0; j < Tmax; ++j) std::copy_n(x.data() + j * cols, e_cols, xe.data() + j * e_cols);

  std::printf("1 thread, medians of %d; GFLOP/s (2·rows·cols·T per call)\n\n", reps);
  std::printf(
      "| ISA | T | bf16 fp32 (exact) | bf16 dp (bf16) | MXFP4 f32 (exact) | MXFP4 q8 (int8) | MXFP4 dp (mxfp8) |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  for (k3::Isa isa : k3::supported_isas()) {
    if (isa == k3::Isa::Scalar) continue;
    const k3::KernelTable& kt = k3::kernels_for(isa);
    for (int64_t T : tokens) {
      const double fb = 2.0 * rows * cols * T / 1e9, fm = 2.0 * e_rows * e_cols * T / 1e9;
      const int r = T >= 128 ? std::max(1, reps / 2) : reps;
      const double a =
          time_it(r, [&] { kt.gemm_bf16(w.data(), cols, cols, x.data(), cols, T, y.data(), rows, 0, rows); });
      const double b =
          time_it(r, [&] { kt.gemm_bf16_dp(w.data(), cols, cols, xb.data(), cols, T, y.data(), rows, 0, rows); });
      const double c = time_it(r, [&] {
        kt.gemm_mxfp4_f32(packed.data(), scale.data(), e_cols, xe.data(), e_cols, T, y.data(), e_rows, 0, e_rows);
      });
      const double d = time_it(r, [&] {
        kt.gemm_mxfp4_q8(packed.data(), scale.data(), e_cols, xq.q.data(), xq.s.data(), T, y.data(), e_rows, 0, e_rows);
      });
      const double e = time_it(r, [&] {
        kt.gemm_mxfp4_dp(packed.data(), scale.data(), e_cols, xm.data(), e_cols, T, y.data(), e_rows, 0, e_rows);
      });
      std::printf("| %s | %lld | %.1f | %.1f | %.1f | %.1f | %.1f |\n", k3::isa_name(isa), static_cast<long long>(T),
                  fb / a, fb / b, fm / c, fm / d, fm / e);
      std::fflush(stdout);
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "k3_bench_numerics_gemm: %s\n", e.what());
  return 1;
}
