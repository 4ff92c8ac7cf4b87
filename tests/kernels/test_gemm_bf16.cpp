// BF16 GEMV/GEMM kernels of every supported ISA vs the fp64 oracle k3::ref::matmul.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/ref/linear.h"
#include "kernels/threads.h"

// The AVX2 gemm_bf16's row-dot kernel on its own (src/kernels/avx2/gemm_bf16.cpp; AVX2 CPUs only).
namespace k3::avx2 {
void gemm_bf16_rowdot(const uint16_t* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t t, float* y,
                      int64_t ldy, int64_t r0, int64_t r1);
}  // namespace k3::avx2

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
void expect_close_gemm(const std::vector<uint16_t>& w, const std::vector<float>& x, int64_t rows, int64_t cols,
                       int64_t t, const std::vector<float>& y, const char* what, double tol = Tol::kGemmBf16) {
  std::vector<float> ref(static_cast<size_t>(t * rows));
  k3::ref::matmul(view_bf16(w, rows, cols), x.data(), t, ref.data());
  for (int64_t j = 0; j < t; ++j)
    for (int64_t r = 0; r < rows; ++r) {
      double mag = 0;
      for (int64_t c = 0; c < cols; ++c)
        mag += std::fabs(k3::bf16_to_f32(w[r * cols + c]) * static_cast<double>(x[j * cols + c]));
      const double err = std::fabs(y[j * rows + r] - ref[j * rows + r]);
      ASSERT_LE(err, tol * mag + 1e-30) << what << " rows=" << rows << " cols=" << cols << " T=" << t << " at t=" << j
                                        << " r=" << r;
    }
}

TEST(GemmBf16, EveryIsaMatchesOracleOnAwkwardShapes) {
  std::mt19937 g(1);
  const int64_t shapes[][3] = {// rows, cols, tokens
                               {1, 1, 1},    {5, 7, 1},    {37, 33, 1},  {13, 250, 2}, {9, 1003, 3}, {6, 1100, 5},
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
      const double tol = Tol::kGemmBf16;
      expect_close_gemm(w, x, rows, cols, t, y, kt.isa_name, tol);
    }
  }
}

// The prefill paths (AVX2: 16-row packed panels x 6-token blocks from T >= 4, or T >= 16 when
// K > 1024; K blocks of 1024): T around the thresholds and not a multiple of the token block,
// rows not a multiple of 16 split at arbitrary r0/r1, K around 8 and the K block, ldw > K.
// Rows outside [r0, r1) must stay untouched, and a row's result must not depend on the split.
// AVX2: for T > 1 the panel path reproduces the row-dot kernel bit for bit.
TEST(GemmBf16, PrefillPathsEdgeCases) {
  std::mt19937 g(3);
  const int64_t ks[] = {0, 1, 7, 8, 9, 127, 128, 129, 1000, 1023, 1024, 1025, 2100};
  const int64_t ts[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15, 16, 17, 47, 48, 49, 255};
  const int64_t rows = 37, pad = 5;           // 37 = 2 x 16 + 5
  const int64_t splits[] = {0, 3, 21, rows};  // [0,3) [3,21) [21,37): none on a 16-row boundary
  const float sentinel = -999.f;
  for (k3::Isa isa : isas_under_test()) {
    const k3::KernelTable& kt = k3::kernels_for(isa);
    for (int64_t k : ks)
      for (int64_t t : ts) {
        if (k >= 1000 && t > 49) continue;  // keep the fp64 oracle cheap
        const int64_t ldw = k + pad;
        auto ws = rand_bf16(g, rows * ldw);
        std::vector<uint16_t> w(rows * k);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < k; ++c) w[r * k + c] = ws[r * ldw + c];
        auto x = rand_f32(g, t * k);
        std::vector<float> y(t * rows, sentinel), whole(t * rows, sentinel);
        for (int s = 0; s + 1 < 4; ++s) {
          kt.gemm_bf16(ws.data(), ldw, k, x.data(), k, t, y.data(), rows, splits[s], splits[s + 1]);
          for (int64_t j = 0; j < t; ++j)
            for (int64_t r = splits[s + 1]; r < rows; ++r)
              ASSERT_EQ(y[j * rows + r], sentinel) << kt.isa_name << " K=" << k << " T=" << t << " wrote row " << r
                                                   << " outside [" << splits[s] << ", " << splits[s + 1] << ")";
        }
        const double tol = Tol::kGemmBf16;
        const std::string what = std::string(kt.isa_name) + " K=" + std::to_string(k) + " T=" + std::to_string(t);
        expect_close_gemm(w, x, rows, k, t, y, what.c_str(), tol);
        if (k == 0) {
          for (float v : y) ASSERT_EQ(v, 0.f) << what;
        }
        kt.gemm_bf16(ws.data(), ldw, k, x.data(), k, t, whole.data(), rows, 0, rows);
        ASSERT_EQ(y, whole) << what << ": a row's result depends on the r0/r1 split";
        if (isa == k3::Isa::Avx2 && t > 1) {
          std::vector<float> rowdot(t * rows, sentinel);
          k3::avx2::gemm_bf16_rowdot(ws.data(), ldw, k, x.data(), k, t, rowdot.data(), rows, 0, rows);
          ASSERT_EQ(y, rowdot) << what << ": differs from the row-dot kernel";
        }
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
  expect_close_gemm(packed, x, rows, cols, t, y1, "ops", Tol::kGemmBf16);
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
