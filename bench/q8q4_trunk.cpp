// Trunk GEMV/GEMM at K3 widths: BF16 (k3::matmul_bf16) vs the trunk quantized at load
// (k3::matmul_quant, q8 / q4), ms per call and the weight bytes read per second.
//
//   k3_bench_q8q4_trunk [-t N] [--rows 12288] [--cols 7168] [-T 1] [-r 20]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "kernels/dispatch.h"
#include "kernels/ops.h"
#include "kernels/q8q4_trunk.h"
#include "kernels/threads.h"
#include "tools/exec_env.h"

int main(int argc, char** argv) {
  k3tools::exec_config({}, k3::Numerics::Exact, 0);  // K3_ISA / K3_NUMERICS / K3_MXFP4 / K3_KERNELS
  CLI::App app{"trunk q8/q4 vs bf16 matmul"};
  int threads = 0, reps = 20;
  int64_t rows = 12288, cols = 7168, T = 1;
  app.add_option("-t", threads, "threads (0 = all)");
  app.add_option("--rows", rows)->check(CLI::Range(1, 1 << 20));
  app.add_option("--cols", cols, "multiple of 32")->check(CLI::Range(32, 1 << 20));
  app.add_option("-T", T, "tokens")->check(CLI::Range(1, 4096));
  app.add_option("-r", reps)->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) k3::set_num_threads(threads);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 0.02f);
  std::vector<uint16_t> w(static_cast<size_t>(rows * cols));
  for (auto& b : w) b = k3::f32_to_bf16(nd(rng));
  k3::TensorView v;
  v.name = "bench";
  v.dtype = k3::DType::BF16;
  v.shape = {rows, cols};
  v.data = reinterpret_cast<const uint8_t*>(w.data());
  v.nbytes = w.size() * 2;
  std::vector<float> x(static_cast<size_t>(T * cols), 0.5f), y(static_cast<size_t>(T * rows));
  auto time_it = [&](auto&& f) {
    f();
    std::vector<double> ms;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  const k3::QuantMatrix q8 = k3::quantize_matrix(v, k3::QuantKind::Q8);
  const k3::QuantMatrix q4 = k3::quantize_matrix(v, k3::QuantKind::Q4);
  std::printf(
      "[%lld, %lld] x T=%lld, %d threads, ISA %s, median of %d\n\n| trunk | ms | weight MB | GB/s |\n|---|---|---|---|\n",
      static_cast<long long>(rows), static_cast<long long>(cols), static_cast<long long>(T), k3::num_threads(),
      k3::isa_name(k3::active_isa()), reps);
  const double b16 = time_it([&] { k3::matmul_bf16(v, x.data(), T, y.data()); });
  std::printf("| bf16 | %.3f | %.1f | %.1f |\n", b16, v.nbytes / 1e6, v.nbytes / b16 / 1e6);
  for (const k3::QuantMatrix* m : {&q8, &q4}) {
    const double t = time_it([&] { k3::matmul_quant(*m, x.data(), T, y.data()); });
    std::printf("| %s | %.3f | %.1f | %.1f |\n", m->kind == k3::QuantKind::Q8 ? "q8" : "q4", t, m->bytes() / 1e6,
                m->bytes() / t / 1e6);
  }
  return 0;
}
