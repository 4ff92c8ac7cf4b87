// AVX2 + FMA BF16 GEMV/GEMM: Y[t, r] = Σ_k W[r, k]·X[t, k], W bf16 [rows, K], X fp32 [T, K].
// bf16 -> fp32 by zero-extension and a 16-bit shift (vpmovzxwd + vpslld), fp32 FMA.
// Register block: 4 weight rows x 3 tokens (12 accumulators); for T > 1 the tokens are tiled
// (48 per tile) and K blocked (1024) so a 4-row weight slice stays in L1 while every token of
// the tile passes over it, and the X tile (48 x 1024 fp32 = 192 KiB) stays in L2.
// T == 1 (decode) streams each row once with 4 concurrent row streams per thread.
#include "kernels/avx2/avx2_kernels.h"
#include "kernels/avx2/avx2_util.h"

namespace k3::avx2 {

namespace {

template <int R, int N>
void micro(const uint16_t* w, int64_t ldw, const float* x, int64_t ldx, int64_t kn, float* y,
           int64_t ldy, bool accumulate) {
  __m256 acc[R][N];
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) acc[r][n] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= kn; i += 8) {
    __m256 xv[N];
    for (int n = 0; n < N; ++n) xv[n] = _mm256_loadu_ps(x + n * ldx + i);
    for (int r = 0; r < R; ++r) {
      const __m256 wv = load_bf16x8(w + r * ldw + i);
      for (int n = 0; n < N; ++n) acc[r][n] = _mm256_fmadd_ps(wv, xv[n], acc[r][n]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) {
      float s = hsum(acc[r][n]);
      for (int64_t j = i; j < kn; ++j) s += bf16_scalar(w + r * ldw + j) * x[n * ldx + j];
      float* d = y + n * ldy + r;
      *d = accumulate ? *d + s : s;
    }
}

using MicroFn = void (*)(const uint16_t*, int64_t, const float*, int64_t, int64_t, float*, int64_t,
                         bool);
constexpr int kR = 4, kN = 3;
constexpr MicroFn kMicro[kR][kN] = {
    {micro<1, 1>, micro<1, 2>, micro<1, 3>},
    {micro<2, 1>, micro<2, 2>, micro<2, 3>},
    {micro<3, 1>, micro<3, 2>, micro<3, 3>},
    {micro<4, 1>, micro<4, 2>, micro<4, 3>},
};

}  // namespace

void gemm_bf16(const uint16_t* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t t,
               float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t tile_t = 48;
  const int64_t kc = t == 1 ? k : 1024;
  for (int64_t t0 = 0; t0 < t; t0 += tile_t) {
    const int64_t tn = t - t0 < tile_t ? t - t0 : tile_t;
    for (int64_t k0 = 0; k0 < k || k0 == 0; k0 += kc) {
      const int64_t kn = k - k0 < kc ? k - k0 : kc;
      for (int64_t r = r0; r < r1; r += kR) {
        const int64_t rn = r1 - r < kR ? r1 - r : kR;
        for (int64_t j = 0; j < tn; j += kN) {
          const int64_t nn = tn - j < kN ? tn - j : kN;
          kMicro[rn - 1][nn - 1](w + r * ldw + k0, ldw, x + (t0 + j) * ldx + k0, ldx, kn,
                                 y + (t0 + j) * ldy + r, ldy, k0 > 0);
        }
      }
      if (k == 0) break;
    }
  }
}

}  // namespace k3::avx2
