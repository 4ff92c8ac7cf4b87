// Batch invariance of the weight kernels: a token's outputs must not depend on how many other
// tokens share the call (continuous batching stacks the decode rows of many sequences into one
// GEMM, and a request's output must equal its lone run — issue 10). For every ISA, the bf16
// GEMM and both MXFP4 paths: each token of a T-token call equals the same token alone (T = 1)
// and inside any sub-batch, bit for bit, at K3's widths (K > the 1024 K block) and odd sizes.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/dispatch.h"
#include "kernels/ops.h"

namespace {

using namespace k3test;

bool same_bits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, sizeof(float) * n) == 0; }

TEST(BatchInvariance, Bf16GemmTokenAloneEqualsTokenInBatch) {
  std::mt19937 g(7);
  const int64_t shapes[][2] = {{37, 3000}, {21, 7168}, {16, 1024}, {9, 1025}, {5, 64}};  // rows, K
  const int64_t Ts[] = {2, 3, 4, 5, 8, 15, 16, 17, 33, 50};
  for (k3::Isa isa : isas_under_test()) {
    const k3::KernelTable& kt = k3::kernels_for(isa);
    for (auto& s : shapes) {
      const int64_t rows = s[0], K = s[1];
      auto w = rand_bf16(g, rows * K);
      auto x = rand_f32(g, 50 * K);
      std::vector<float> alone(50 * rows);
      for (int64_t t = 0; t < 50; ++t)
        kt.gemm_bf16(w.data(), K, K, x.data() + t * K, K, 1, alone.data() + t * rows, rows, 0, rows);
      for (int64_t T : Ts) {
        std::vector<float> y(T * rows);
        kt.gemm_bf16(w.data(), K, K, x.data(), K, T, y.data(), rows, 0, rows);
        for (int64_t t = 0; t < T; ++t)
          ASSERT_TRUE(same_bits(&y[t * rows], &alone[t * rows], rows))
              << kt.isa_name << " rows " << rows << " K " << K << ": token " << t << " of " << T
              << " differs from the token alone";
      }
    }
  }
}

TEST(BatchInvariance, Mxfp4BothPathsTokenAloneEqualsTokenInBatch) {
  std::mt19937 g(8);
  const int64_t shapes[][2] = {{40, 3584}, {19, 3072}, {8, 64}};  // rows, K (multiple of 32)
  const int64_t Ts[] = {2, 3, 4, 7, 8, 9, 16, 17, 33};
  for (k3::Isa isa : isas_under_test()) {
    const k3::KernelTable& kt = k3::kernels_for(isa);
    for (auto& s : shapes) {
      const int64_t rows = s[0], K = s[1];
      auto packed = rand_u8(g, rows * K / 2);
      auto scale = rand_u8(g, rows * K / 32, 118, 130);
      auto x = rand_f32(g, 33 * K);
      // exact f32 path
      std::vector<float> alone(33 * rows);
      for (int64_t t = 0; t < 33; ++t)
        kt.gemm_mxfp4_f32(packed.data(), scale.data(), K, x.data() + t * K, K, 1, alone.data() + t * rows, rows, 0,
                          rows);
      for (int64_t T : Ts) {
        std::vector<float> y(T * rows);
        kt.gemm_mxfp4_f32(packed.data(), scale.data(), K, x.data(), K, T, y.data(), rows, 0, rows);
        for (int64_t t = 0; t < T; ++t)
          ASSERT_TRUE(same_bits(&y[t * rows], &alone[t * rows], rows))
              << kt.isa_name << " exact path rows " << rows << " K " << K << ": token " << t << " of " << T;
      }
      // int8 path: quantize per token (the quantization is per row), then the integer GEMM
      std::vector<int8_t> q(33 * K);
      std::vector<float> qs(33 * K / 32);
      for (int64_t t = 0; t < 33; ++t) kt.quantize_q8(x.data() + t * K, K, q.data() + t * K, qs.data() + t * (K / 32));
      for (int64_t t = 0; t < 33; ++t)
        kt.gemm_mxfp4_q8(packed.data(), scale.data(), K, q.data() + t * K, qs.data() + t * (K / 32), 1,
                         alone.data() + t * rows, rows, 0, rows);
      for (int64_t T : Ts) {
        std::vector<float> y(T * rows);
        kt.gemm_mxfp4_q8(packed.data(), scale.data(), K, q.data(), qs.data(), T, y.data(), rows, 0, rows);
        for (int64_t t = 0; t < T; ++t)
          ASSERT_TRUE(same_bits(&y[t * rows], &alone[t * rows], rows))
              << kt.isa_name << " int8 path rows " << rows << " K " << K << ": token " << t << " of " << T;
      }
    }
  }
}

// Through the threaded ops (row splits, token splits for few-row matrices): a decode batch of
// T rows equals T lone calls.
TEST(BatchInvariance, ThreadedOpsTokenAloneEqualsTokenInBatch) {
  std::mt19937 g(9);
  for (const int64_t rows : {int64_t{24}, int64_t{700}}) {
    const int64_t K = 2100, T = 40;
    auto w = rand_bf16(g, rows * K);
    auto x = rand_f32(g, T * K);
    std::vector<float> y(T * rows), y1(rows);
    k3::matmul_bf16_raw(w.data(), rows, K, K, x.data(), T, y.data(), "w");
    for (int64_t t = 0; t < T; ++t) {
      k3::matmul_bf16_raw(w.data(), rows, K, K, x.data() + t * K, 1, y1.data(), "w");
      ASSERT_TRUE(same_bits(y1.data(), &y[t * rows], rows)) << "rows " << rows << " token " << t;
    }
  }
}

}  // namespace
