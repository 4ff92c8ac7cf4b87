// k3_bench_vec — single-thread speed of the k3::vec primitives (vec.h) per ISA against the
// k3::ref scalar functions, in bytes/s (bytes read + written). Google Benchmark binary:
//
//   k3_bench_vec [--benchmark_filter=sigmoid] [--benchmark_min_time=0.2]
//
// Sizes are K3 widths: activations over 12288 (KDA projections), RMSNorm over 7168 (hidden),
// softmax over 4096 (an attention row), the KDA short convolution with d_conv = 4 over C = 12288
// channels for decode (T = 1) and a prefill chunk (T = 64). Rows fit in L1/L2: this measures
// compute, not DRAM.
#include <benchmark/benchmark.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/ref/activations.h"
#include "kernels/ref/norms.h"
#include "tools/exec_env.h"

namespace {

std::vector<float> rnd(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

constexpr int64_t kAct = 12288, kHidden = 7168, kRow = 4096, kConvC = 12288, kDConv = 4;

// Registers one benchmark: name "op/ref" or "op/<isa>", bytes read + written per call, the call.
void add(const std::string& name, int64_t bytes, std::function<void()> fn) {
  benchmark::RegisterBenchmark(name.c_str(), [bytes, fn](benchmark::State& st) {
    for (auto _ : st) {
      fn();
      benchmark::ClobberMemory();
    }
    st.SetBytesProcessed(st.iterations() * bytes);
  });
}

// Buffers shared by all benchmarks (each benchmark overwrites its own output only; softmax rows
// are updated in place).
struct Data {
  std::vector<float> x = rnd(kAct, -8.f, 8.f, 1), y = std::vector<float>(kAct);
  std::vector<float> h = rnd(kHidden, -3.f, 3.f, 2), w = rnd(kHidden, 0.5f, 1.5f, 3), hy = std::vector<float>(kHidden);
  std::vector<float> row = rnd(kRow, -10.f, 10.f, 4), rowy = row;
  std::vector<float> ext = rnd((kDConv - 1 + 64) * kConvC, -2.f, 2.f, 5), taps = rnd(kDConv * kConvC, -1.f, 1.f, 6),
                     out = std::vector<float>(64 * kConvC);
};

void conv_ref(const float* ext, const float* taps, int64_t T, int64_t C, int64_t d_conv, float* out) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) {
      float z = 0.f;
      for (int64_t j = 0; j < d_conv; ++j) z += taps[j * C + c] * ext[(t + j) * C + c];
      out[t * C + c] = k3::ref::silu(z);
    }
}

void register_all(Data& d) {
  const int64_t act_b = 8 * kAct, norm_b = 12 * kHidden, row_b = 8 * kRow;
  auto conv_b = [](int64_t T) { return 4 * ((kDConv - 1 + T) * kConvC + kDConv * kConvC + T * kConvC); };
  // k3::ref baselines (scalar, std::exp, fp64 sums).
  add("sigmoid/ref", act_b, [&d] {
    for (int64_t i = 0; i < kAct; ++i) d.y[i] = k3::ref::sigmoid(d.x[i]);
  });
  add("silu/ref", act_b, [&d] {
    for (int64_t i = 0; i < kAct; ++i) d.y[i] = k3::ref::silu(d.x[i]);
  });
  add("rmsnorm/ref", norm_b, [&d] { k3::ref::rmsnorm(d.h.data(), kHidden, d.w.data(), 1e-6f, d.hy.data()); });
  add("softmax/ref", row_b, [&d] { k3::ref::softmax(d.row.data(), kRow, d.rowy.data()); });
  for (int64_t T : {1, 64})
    add("short_conv_silu_T" + std::to_string(T) + "/ref", conv_b(T),
        [&d, T] { conv_ref(d.ext.data(), d.taps.data(), T, kConvC, kDConv, d.out.data()); });
  for (k3::Isa isa : k3::supported_isas()) {
    const k3::KernelTable* k = &k3::kernels_for(isa);
    const std::string s = std::string("/") + k3::isa_name(isa);
    add("sigmoid" + s, act_b, [&d, k] { k->sigmoid(d.x.data(), d.y.data(), kAct); });
    add("silu" + s, act_b, [&d, k] { k->silu(d.x.data(), d.y.data(), kAct); });
    add("exp" + s, act_b, [&d, k] { k->exp(d.x.data(), d.y.data(), kAct); });
    add("rmsnorm" + s, norm_b, [&d, k] { k->rmsnorm(d.h.data(), d.w.data(), 1e-6f, d.hy.data(), kHidden); });
    // In place on the same row again and again: the kernel is branch-free, so its speed does not
    // depend on the values (a copy per call would dominate: memmove is slow on some hosts).
    add("softmax" + s, row_b, [&d, k] { k->softmax(d.rowy.data(), kRow); });
    add("dot" + s, act_b, [&d, k] { benchmark::DoNotOptimize(k->dot(d.x.data(), d.y.data(), kAct)); });
    for (int64_t T : {1, 64})
      add("short_conv_silu_T" + std::to_string(T) + s, conv_b(T),
          [&d, k, T] { k->short_conv_silu(d.ext.data(), d.taps.data(), T, kConvC, kDConv, d.out.data()); });
  }
}

}  // namespace

int main(int argc, char** argv) {
  k3tools::exec_config({}, k3::Numerics::Exact, 0);  // K3_ISA / K3_NUMERICS / K3_MXFP4 / K3_KERNELS
  Data d;
  register_all(d);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
