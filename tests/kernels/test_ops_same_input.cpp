// ops.h matmul_same_input (issue 14: one parallel region for the projections of one input):
// every output is bit-identical to matmul() of each weight alone, with 1 and 2 threads, for
// decode-sized T (fused), T >= 32 (per weight) and row counts that are not multiples of the
// 16-row unit or the 4-row block; and against the fp64 oracle (Tol::kGemmBf16). Bad calls are
// clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/threads.h"

namespace {

using namespace k3test;

struct ScopedThreads {
  int saved = k3::num_threads();
  explicit ScopedThreads(int n) { k3::set_num_threads(n); }
  ~ScopedThreads() { k3::set_num_threads(saved); }
};

k3::TensorView view(const std::vector<uint16_t>& w, int64_t rows, int64_t cols, const std::string& name) {
  k3::TensorView v;
  v.name = name;
  v.dtype = k3::DType::BF16;
  v.shape = {rows, cols};
  v.data = reinterpret_cast<const uint8_t*>(w.data());
  v.nbytes = static_cast<uint64_t>(rows * cols * 2);
  return v;
}

TEST(OpsSameInput, BitIdenticalToOneProductAtATime) {
  std::mt19937 g(14);
  const std::vector<int64_t> rows = {37, 16, 3, 100, 1};
  for (int64_t cols : {96, 1040})  // K > 1024: more than one K block
    for (int64_t T : {1, 2, 5, 31, 32, 40}) {
      std::vector<std::vector<uint16_t>> w;
      std::vector<k3::TensorView> v;
      for (size_t i = 0; i < rows.size(); ++i) w.push_back(rand_bf16(g, rows[i] * cols));
      for (size_t i = 0; i < rows.size(); ++i) v.push_back(view(w[i], rows[i], cols, "w" + std::to_string(i)));
      const auto x = rand_f32(g, T * cols);
      std::vector<const k3::TensorView*> ws;
      for (auto& t : v) ws.push_back(&t);
      for (int threads : {1, 2}) {
        ScopedThreads st(threads);
        std::vector<std::vector<float>> fused(rows.size()), alone(rows.size());
        std::vector<float*> ys;
        for (size_t i = 0; i < rows.size(); ++i) {
          fused[i].assign(static_cast<size_t>(T * rows[i]), -7.f);
          alone[i].assign(fused[i].size(), -9.f);
          ys.push_back(fused[i].data());
          k3::matmul(v[i], x.data(), T, alone[i].data());
        }
        k3::matmul_same_input(ws, x.data(), T, ys);
        for (size_t i = 0; i < rows.size(); ++i) {
          ASSERT_EQ(fused[i], alone[i]) << "weight " << i << " cols=" << cols << " T=" << T << " threads=" << threads;
          for (int64_t t = 0; t < T; ++t)
            for (int64_t r = 0; r < rows[i]; ++r) {
              double z = 0, sa = 0;
              for (int64_t c = 0; c < cols; ++c) {
                const double p = static_cast<double>(k3::bf16_to_f32(w[i][r * cols + c])) * x[t * cols + c];
                z += p;
                sa += std::fabs(p);
              }
              ASSERT_NEAR(fused[i][t * rows[i] + r], z, Tol::kGemmBf16 * sa) << "w" << i << " t=" << t << " r=" << r;
            }
        }
      }
    }
}

TEST(OpsSameInput, BadCallsAreClearErrors) {
  std::mt19937 g(3);
  const auto a = rand_bf16(g, 4 * 64), b = rand_bf16(g, 4 * 32);
  const k3::TensorView va = view(a, 4, 64, "layers.1.q_proj.weight"), vb = view(b, 4, 32, "layers.1.k_proj.weight");
  std::vector<float> x(64), y1(4), y2(4);
  const k3::TensorView* ws[2] = {&va, &vb};
  float* ys[2] = {y1.data(), y2.data()};
  try {
    k3::matmul_same_input(ws, x.data(), 1, ys);
    FAIL() << "different input widths accepted";
  } catch (const k3::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("layers.1.k_proj.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("layers.1.q_proj.weight"), std::string::npos) << m;
  }
  EXPECT_THROW(
      k3::matmul_same_input(std::span<const k3::TensorView* const>(ws, 1), x.data(), 1, std::span<float* const>(ys, 2)),
      k3::Error);
}

}  // namespace
