// How ops.h splits work across threads must not change results: matmul_bf16_raw splits rows, or
// (few rows, many tokens) tokens in units of >= 16 with the remainder folded into the last unit.
// Outputs with 1 and 2 threads are bit-identical, including a token count of 16·n + 1 and K >
// 1024 (where a 1-token call would take the decode GEMV with its different summation order).
#include <gtest/gtest.h>

#include <cstring>
#include <optional>

#include "kernel_test_util.h"
#include "core/error.h"
#include "kernels/exec_config.h"
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

// The tensor-parallel split (model/split.h) computes blocks of a matrix's output rows on
// different ranks: the output projections and MLP columns in blocks starting on a multiple of 16
// rows, the heads' projections in blocks of whole heads (KDA b_proj: one row per head, so any
// start). Every row must be the bits the whole matrix gives it, in every numerics mode and ISA,
// for decode and prefill token counts and K that is and is not a multiple of 32 (the int8 /
// MXFP8 activation groups).
TEST(OpsSplit, RowBlocksOfAMatrixAreBitIdenticalToTheWhole) {
  std::mt19937 g(23);
  for (k3::Isa isa : {k3::Isa::Scalar, k3::Isa::Avx2, k3::Isa::Avx512})
    for (k3::Numerics nm : {k3::Numerics::Exact, k3::Numerics::Int8, k3::Numerics::Bf16, k3::Numerics::Mxfp8}) {
      k3::ExecConfig c;
      c.isa = isa;
      c.numerics = nm;
      c.threads = 1;
      std::optional<k3::ExecContext> ctx;
      try {
        ctx = k3::resolve_exec_config(c);
      } catch (const k3::Error&) {
        continue;  // this CPU lacks the ISA
      }
      const k3::ExecScope scope(*ctx);
      const int64_t rows = 88;
      // 16-row blocks [0,32) [32,48) [48,64) [64,88) (the last one short), and blocks of any start
      const std::vector<std::vector<int64_t>> splits = {{0, 32, 48, 64, rows}, {0, 1, 27, 51, 52, rows}};
      for (int64_t cols : {48, 64, 80, 1040})
        for (int64_t T : {1, 3, 5, 17}) {
          const auto w = rand_bf16(g, rows * cols);
          const auto x = rand_f32(g, T * cols);
          std::vector<float> whole(T * rows);
          k3::matmul_bf16_raw(w.data(), rows, cols, cols, x.data(), T, whole.data());
          for (const std::vector<int64_t>& cuts : splits)
            for (size_t b = 0; b + 1 < cuts.size(); ++b) {
              const int64_t r0 = cuts[b], n = cuts[b + 1] - cuts[b];
              std::vector<float> part(T * n);
              k3::matmul_bf16_raw(w.data() + r0 * cols, n, cols, cols, x.data(), T, part.data());
              for (int64_t t = 0; t < T; ++t)
                for (int64_t r = 0; r < n; ++r)
                  ASSERT_EQ(std::memcmp(&part[t * n + r], &whole[t * rows + r0 + r], 4), 0)
                      << k3::numerics_name(nm) << " isa " << static_cast<int>(isa) << " cols " << cols << " T " << T
                      << " row " << r0 + r;
            }
        }
    }
}

}  // namespace
