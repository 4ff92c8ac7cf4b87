// How ops.h splits work across threads must not change results: matmul_bf16_raw splits rows, or
// (few rows, many tokens) tokens in units of >= 16 with the remainder folded into the last unit.
// Outputs with 1 and 2 threads are bit-identical, including a token count of 16·n + 1 and K >
// 1024 (where a 1-token call would take the decode GEMV with its different summation order).
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/ref/linear.h"
#include "kernels/threads.h"

namespace {

using namespace k3test;

struct ScopedThreads {
  int saved = k3::num_threads();
  explicit ScopedThreads(int n) { k3::set_num_threads(n); }
  ~ScopedThreads() { k3::set_num_threads(saved); }
};

TEST(OpsSplit, Bf16TokenSplitIsBitIdenticalToOneThread) {
  std::mt19937 g(21);
  for (int64_t rows : {2, 16, 40})  // 1 or 3 row units: fewer than 2 per thread -> token split
    for (int64_t cols : {128, 1040})
      for (int64_t T : {32, 33, 47, 64, 65}) {
        const auto w = rand_bf16(g, rows * cols);
        const auto x = rand_f32(g, T * cols);
        std::vector<float> y1(T * rows), y2(T * rows);
        {
          ScopedThreads one(1);
          k3::matmul_bf16_raw(w.data(), rows, cols, cols, x.data(), T, y1.data());
        }
        {
          ScopedThreads two(2);
          k3::matmul_bf16_raw(w.data(), rows, cols, cols, x.data(), T, y2.data());
        }
        ASSERT_EQ(y1, y2) << "rows=" << rows << " cols=" << cols << " T=" << T;
        // and against the fp64 oracle (Tol::kGemmBf16 relative to the sum of |terms|)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t r = 0; r < rows; ++r) {
            double z = 0, sa = 0;
            for (int64_t c = 0; c < cols; ++c) {
              const double p = static_cast<double>(k3::bf16_to_f32(w[r * cols + c])) * x[t * cols + c];
              z += p;
              sa += std::fabs(p);
            }
            ASSERT_NEAR(y2[t * rows + r], z, Tol::kGemmBf16 * sa) << "t=" << t << " r=" << r;
          }
      }
}

}  // namespace
