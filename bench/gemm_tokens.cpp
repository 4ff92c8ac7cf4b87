// k3_bench_gemm_tokens — the weight GEMMs of batched decode: time of one product with a K3-width
// weight for T = 1, 2, 4, ... tokens (T = concurrent streams in a decode step), as GB/s of weight
// read and GFLOP/s. Decode batching pays while the time stays near the T = 1 (bandwidth) time.
//   k3_bench_gemm_tokens [--tokens 1,2,4,8,16,32] [--reps 5] [--threads N]
// Shapes: bf16 KDA q_proj [12288, 7168] (176 MB) in the exact and bf16 modes, the same matrix
// quantized to q8 (`--trunk-type q8`, 91 MB) with fp32 activations (exact mode) and int8
// activations (int8 mode, VNNI), and 24 distinct MXFP4 expert w1 [3072, 3584] (int8 path,
// 140 MB), so DRAM, not cache, is read. The kernels alternate within each repetition (medians).
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

#include "kernels/exec_config.h"
#include "kernels/q8q4_trunk.h"
#include "tools/exec_env.h"

namespace {
/// matmul_quant_q8 with a given kernel (the AVX-512 VNNI half alone vs the dispatched kernel).
void q8_with(const k3::QuantMatrix& m, const float* x, int64_t T, float* y,
             void (*kern)(const k3::QuantMatrix&, const int8_t*, const float*, const int32_t*, int64_t, float*, int64_t,
                          int64_t, int64_t)) {
  const int64_t K = m.cols, G = K / 32;
  std::vector<int8_t> q(static_cast<size_t>(T * K));
  std::vector<float> s(static_cast<size_t>(T * G));
  std::vector<int32_t> sum(static_cast<size_t>(T * G));
  for (int64_t t = 0; t < T; ++t) k3::kernels().quantize_q8(x + t * K, K, q.data() + t * K, s.data() + t * G);
  for (size_t b = 0; b < sum.size(); ++b)
    for (int i = 0; i < 32; ++i) sum[b] += q[b * 32 + i];
  k3::parallel_for(m.rows16() / 16, 1, [&](int64_t u0, int64_t u1) {
    kern(m, q.data(), s.data(), sum.data(), T, y, m.rows, 16 * u0, std::min(m.rows, 16 * u1));
  });
}
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
  // The same bf16 matrix quantized to q8 (the trunk type `--trunk-type q8`; kernels/q8q4_trunk.h).
  k3::TensorView wv;
  wv.name = "bench.q_proj";
  wv.dtype = k3::DType::BF16;
  wv.shape = {rows, cols};
  wv.data = reinterpret_cast<const uint8_t*>(w.data());
  wv.nbytes = w.size() * 2;
  const k3::QuantMatrix q8 = k3::quantize_matrix(wv, k3::QuantKind::Q8);
  auto ctx_of = [](k3::Numerics n) {
    k3::ExecConfig c;
    c.numerics = n;
    return k3::resolve_exec_config(c);
  };
  const k3::ExecContext exact = ctx_of(k3::Numerics::Exact), bf16 = ctx_of(k3::Numerics::Bf16);
  std::printf("ISA %s | threads %d\n", k3::isa_name(k3::active_isa()), k3::num_threads());
  std::printf(
      "| T | bf16 exact ms | GB/s | GFLOP/s | bf16 mode (vdpbf16ps) ms | GFLOP/s | q8 fp32-act ms | q8 int8-act ms | "
      "GB/s | GOP/s | q8 int8 VNNI-only ms | MXFP4 24x[3072,3584] int8 ms | GB/s | GOP/s |\n"
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  const bool avx512 = k3::active_isa() == k3::Isa::Avx512;
  std::printf("(q8 int8: AMX-INT8 %s for T >= %lld; the VNNI-only column times the vpdpbusd kernel alone)\n",
              avx512 && k3::detail::q8_amx_available() ? "used" : "not available",
              static_cast<long long>(k3::detail::kAmxMinTokens));
  for (int64_t T : tokens) {
    std::vector<double> tb, td, tf, tq, tv, tm;
    for (int r = 0; r < reps; ++r) {  // the kernels alternate within each repetition
      double t0 = now_s();
      {
        const k3::ExecScope s(exact);
        k3::matmul_bf16_raw(w.data(), rows, cols, cols, x.data(), T, y.data(), "bench");
      }
      tb.push_back(now_s() - t0);
      t0 = now_s();
      {
        const k3::ExecScope s(bf16);
        k3::matmul_bf16_raw(w.data(), rows, cols, cols, x.data(), T, y.data(), "bench");
      }
      td.push_back(now_s() - t0);
      t0 = now_s();
      k3::matmul_quant_f32(q8, x.data(), T, y.data());
      tf.push_back(now_s() - t0);
      t0 = now_s();
      k3::matmul_quant_q8(q8, x.data(), T, y.data());
      tq.push_back(now_s() - t0);
      t0 = now_s();
      if (avx512) q8_with(q8, x.data(), T, y.data(), k3::detail::gemm_q8_q8_avx512_vnni);
      tv.push_back(now_s() - t0);
      t0 = now_s();
      for (int64_t e = 0; e < E; ++e) {
        k3::Mxfp4Matrix m{packed.data() + e * e_rows * e_cols / 2, scale.data() + e * e_rows * e_cols / 32, e_rows,
                          e_cols};
        k3::matmul_mxfp4(m, x.data(), T, y.data(), k3::Mxfp4Path::Int8, "bench");
      }
      tm.push_back(now_s() - t0);
    }
    const double b = median(tb), d = median(td), f = median(tf), q = median(tq), v = median(tv), m = median(tm);
    const double wb = static_cast<double>(rows * cols * 2), wq = static_cast<double>(q8.bytes()),
                 wm = static_cast<double>(E * e_rows * e_cols) * (0.5 + 1.0 / 32);
    const double flop = 2.0 * rows * cols * T;
    std::printf("| %lld | %.2f | %.1f | %.1f | %.2f | %.1f | %.2f | %.2f | %.1f | %.1f | %.2f | %.2f | %.1f | %.1f |\n",
                static_cast<long long>(T), b * 1e3, wb / b / 1e9, flop / b / 1e9, d * 1e3, flop / d / 1e9, f * 1e3,
                q * 1e3, wq / q / 1e9, flop / q / 1e9, v * 1e3, m * 1e3, wm / m / 1e9,
                2.0 * E * e_rows * e_cols * T / m / 1e9);
    std::fflush(stdout);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "k3_bench_gemm_tokens: %s\n", e.what());
  return 1;
}
