// BF16 GEMV/GEMM kernels of every supported ISA vs the fp64 oracle k3::ref::matmul.
#include <gtest/gtest.h>

#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/ref/linear.h"
#include "kernels/threads.h"

namespace {

using namespace k3test;

k3::TensorView view_bf16(const std::vector<uint16_t>& w, int64_t rows, int64_t cols) {
  k3::TensorView v;
  v.name = "test.w";
  v.dtype = k3::DType::BF16;
  v.shape = {rows, cols};
  v.data = reinterpret_cast<const uint8_t*>(w.data());
  v.nbytes = w.size() * 2;
  return v;
}

// |y - ref| <= tol · Σ_k |w_k x_k| per output.
void expect_close_gemm(const std::vector<uint16_t>& w, const std::vector<float>& x, int64_t rows,
                       int64_t cols, int64_t t, const std::vector<float>& y, const char* what,
                       double tol = Tol::kGemmBf16) {
  std::vector<float> ref(static_cast<size_t>(t * rows));
  k3::ref::matmul(view_bf16(w, rows, cols), x.data(), t, ref.data());
  for (int64_t j = 0; j < t; ++j)
    for (int64_t r = 0; r < rows; ++r) {
      double mag = 0;
      for (int64_t c = 0; c < cols; ++c)
        mag += std::fabs(k3::bf16_to_f32(w[r * cols + c]) * static_cast<double>(x[j * cols + c]));
      const double err = std::fabs(y[j * rows + r] - ref[j * rows + r]);
      ASSERT_LE(err, tol * mag + 1e-30)
          << what << " rows=" << rows << " cols=" << cols << " T=" << t << " at t=" << j << " r=" << r;
    }
}

TEST(GemmBf16, EveryIsaMatchesOracleOnAwkwardShapes) {
  std::mt19937 g(1);
  const int64_t shapes[][3] = {  // rows, cols, tokens
      {1, 1, 1},   {5, 7, 1},   {37, 33, 1},  {13, 250, 2},  {9, 1003, 3}, {6, 1100, 5},
      {17, 129, 7}, {3, 2049, 4}, {11, 40, 50}, {4, 16, 1},   {8, 8, 6},    {2, 0, 3}};
  for (k3::Isa isa : isas_under_test()) {
    const k3::KernelTable& kt = k3::kernels_for(isa);
    for (auto& s : shapes) {
      const int64_t rows = s[0], cols = s[1], t = s[2];
      auto w = rand_bf16(g, rows * cols);
      auto x = rand_f32(g, t * cols);
      std::vector<float> y(t * rows, -999.f);
      // two row ranges (as two threads would) to exercise r0 > 0
      const int64_t mid = rows / 2;
      kt.gemm_bf16(w.data(), cols, cols, x.data(), cols, t, y.data(), rows, 0, mid);
      kt.gemm_bf16(w.data(), cols, cols, x.data(), cols, t, y.data(), rows, mid, rows);
      // AVX-512 prefill (T >= 4) rounds the activations to bf16 for vdpbf16ps (gemm_bf16.cpp)
      const double tol = (isa == k3::Isa::Avx512 && t >= 4) ? Tol::kGemmBf16DotBf16 : Tol::kGemmBf16;
      expect_close_gemm(w, x, rows, cols, t, y, kt.isa_name, tol);
    }
  }
}

TEST(GemmBf16, StridedRowsAndOpsThreadsAreDeterministic) {
  std::mt19937 g(2);
  const int64_t rows = 70, cols = 300, ldw = 311, t = 9;
  auto w = rand_bf16(g, rows * ldw);
  auto x = rand_f32(g, t * cols);
  std::vector<uint16_t> packed(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) packed[r * cols + c] = w[r * ldw + c];
  std::vector<float> y1(t * rows), y2(t * rows);
  const int saved = k3::num_threads();
  k3::set_num_threads(1);
  k3::matmul_bf16_raw(w.data(), rows, cols, ldw, x.data(), t, y1.data());
  k3::set_num_threads(2);
  k3::matmul_bf16_raw(w.data(), rows, cols, ldw, x.data(), t, y2.data());
  k3::set_num_threads(saved);
  EXPECT_EQ(y1, y2);  // each row is computed by one thread with the same code: bitwise equal
  expect_close_gemm(packed, x, rows, cols, t, y1, "ops");
}

TEST(GemmBf16, OpsRejectBadWeights) {
  std::vector<uint16_t> w(6);
  k3::TensorView v = view_bf16(w, 2, 3);
  std::vector<float> x(3), y(2);
  v.dtype = k3::DType::F32;
  EXPECT_THROW(k3::matmul_bf16(v, x.data(), 1, y.data()), k3::Error);
  v.dtype = k3::DType::BF16;
  v.shape = {6};
  EXPECT_THROW(k3::matmul_bf16(v, x.data(), 1, y.data()), k3::Error);
  v.shape = {2, 3};
  EXPECT_THROW(k3::matmul_bf16(v, x.data(), -1, y.data()), k3::Error);
  EXPECT_NO_THROW(k3::matmul_bf16(v, x.data(), 1, y.data()));
}

}  // namespace
