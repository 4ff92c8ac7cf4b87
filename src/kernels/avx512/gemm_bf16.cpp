// AVX-512 BF16 GEMV/GEMM: Y[t, r] = Σ_k W[r, k]·X[t, k], W bf16 [rows, K], X fp32 [T, K].
// Same structure as the AVX2 kernel with 16 lanes: bf16 -> fp32 by vpmovzxwd + vpslld, fp32
// FMA, register block 4 rows x 6 tokens (24 accumulators of 32 registers; decode: 4 rows x 1),
// masked tails (no scalar remainder loop). Tokens tiled by 48, K blocked by 1024 for T > 1.
// (The 'bf16' numerics mode's vdpbf16ps kernel is gemm_dp.cpp.)
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/avx512_util.h"
#include "kernels/avx2/avx2_kernels.h"

namespace k3::avx512 {

namespace {

template <int R, int N>
void micro(const uint16_t* w, int64_t ldw, const float* x, int64_t ldx, int64_t kn, float* y, int64_t ldy,
           bool accumulate) {
  __m512 acc[R][N];
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) acc[r][n] = _mm512_setzero_ps();
  // R converted weight vectors stay in registers; each token's X vector is loaded once and used
  // for the R rows (R·N accumulators + R + 1 registers: 4 x 6 -> 29 of 32).
  int64_t i = 0;
  for (; i + 16 <= kn; i += 16) {
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load_bf16x16(w + r * ldw + i);
    for (int n = 0; n < N; ++n) {
      const __m512 xv = _mm512_loadu_ps(x + n * ldx + i);
      for (int r = 0; r < R; ++r) acc[r][n] = _mm512_fmadd_ps(wv[r], xv, acc[r][n]);
    }
  }
  if (i < kn) {
    const __mmask16 m = tail_mask16(kn - i);
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load_bf16x16_mask(w + r * ldw + i, m);
    for (int n = 0; n < N; ++n) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + n * ldx + i);
      for (int r = 0; r < R; ++r) acc[r][n] = _mm512_fmadd_ps(wv[r], xv, acc[r][n]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) {
      const float s = _mm512_reduce_add_ps(acc[r][n]);
      float* d = y + n * ldy + r;
      *d = accumulate ? *d + s : s;
    }
}

using MicroFn = void (*)(const uint16_t*, int64_t, const float*, int64_t, int64_t, float*, int64_t, bool);

// FMA path for T > 1: 4 rows x 6 tokens (24 FMAs per 4 bf16 conversions and 10 loads; 1.3x the
// 4 x 4 block at T = 16, k3_bench_gemm_tokens; 3 x 8 was slower: more X loads per FMA). Every
// output's arithmetic is the same for any block shape, so results do not change.
constexpr int kFR = 4, kFN = 6;
void gemm_fma(const uint16_t* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t t, float* y, int64_t ldy,
              int64_t r0, int64_t r1);

// Decode (T == 1) GEMV: 8 rows per group, K unrolled by 32 with a software prefetch of each row
// kPrefetch elements ahead, so that 8 row streams (not 4) are in flight per core. Each row's
// arithmetic is micro<R, 1>'s exactly (one accumulator fed in ascending 16-element chunks, the
// same masked tail, the same horizontal sum), so decode rows keep the bits of batched rows.
constexpr int kGemvR = 8;
constexpr int64_t kPrefetch = 1024;  // elements (2 KiB) ahead per row
template <int R>
void gemv1(const uint16_t* w, int64_t ldw, const float* x, int64_t, int64_t kn, float* y, int64_t, bool accumulate) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= kn; i += 32) {
    for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(w + r * ldw + i + kPrefetch), _MM_HINT_T0);
    const __m512 x0 = _mm512_loadu_ps(x + i);
    const __m512 x1 = _mm512_loadu_ps(x + i + 16);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(load_bf16x16(w + r * ldw + i), x0, acc[r]);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(load_bf16x16(w + r * ldw + i + 16), x1, acc[r]);
  }
  for (; i + 16 <= kn; i += 16) {
    const __m512 xv = _mm512_loadu_ps(x + i);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(load_bf16x16(w + r * ldw + i), xv, acc[r]);
  }
  if (i < kn) {
    const __mmask16 m = tail_mask16(kn - i);
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(load_bf16x16_mask(w + r * ldw + i, m), xv, acc[r]);
  }
  for (int r = 0; r < R; ++r) {
    const float s = _mm512_reduce_add_ps(acc[r]);
    y[r] = accumulate ? y[r] + s : s;
  }
}
constexpr MicroFn kMicro1[kGemvR] = {gemv1<1>, gemv1<2>, gemv1<3>, gemv1<4>, gemv1<5>, gemv1<6>, gemv1<7>, gemv1<8>};
constexpr MicroFn kMicro[kFR][kFN] = {
    {micro<1, 1>, micro<1, 2>, micro<1, 3>, micro<1, 4>, micro<1, 5>, micro<1, 6>},
    {micro<2, 1>, micro<2, 2>, micro<2, 3>, micro<2, 4>, micro<2, 5>, micro<2, 6>},
    {micro<3, 1>, micro<3, 2>, micro<3, 3>, micro<3, 4>, micro<3, 5>, micro<3, 6>},
    {micro<4, 1>, micro<4, 2>, micro<4, 3>, micro<4, 4>, micro<4, 5>, micro<4, 6>},
};

}  // namespace

// K <= 1024 (K3-mini's 128-384-wide layers): the AVX2 packed-panel kernel, whose vector
// accumulators need no horizontal sum per output (this kernel's 16-lane reductions cost more than
// they save at such K: K3-mini prefill is slower on AVX-512 than on AVX2). The choice
// depends on K only, so a token's bits still do not depend on T (batch invariance).
void gemm_bf16(const uint16_t* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t t, float* y, int64_t ldy,
               int64_t r0, int64_t r1) {
  if (k <= 1024) avx2::gemm_bf16(w, ldw, k, x, ldx, t, y, ldy, r0, r1);
  else gemm_fma(w, ldw, k, x, ldx, t, y, ldy, r0, r1);
}

namespace {

void gemm_fma(const uint16_t* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t t, float* y, int64_t ldy,
              int64_t r0, int64_t r1) {
  // Every output is summed in K blocks of 1024 (one horizontal sum per block, blocks added in
  // order), whatever T: a token's outputs are then the same bits alone (decode, T == 1) as in a
  // batch of any size (continuous batching; tests/kernels/test_batch_invariance.cpp). T == 1
  // walks each group of rows through all its K blocks before the next group: rows stream in order.
  if (t == 1) {
    for (int64_t r = r0; r < r1; r += kGemvR) {
      const int64_t rn = r1 - r < kGemvR ? r1 - r : kGemvR;
      for (int64_t k0 = 0; k0 < k || k0 == 0; k0 += 1024) {
        const int64_t kn = k - k0 < 1024 ? k - k0 : 1024;
        kMicro1[rn - 1](w + r * ldw + k0, ldw, x + k0, ldx, kn, y + r, ldy, k0 > 0);
        if (k == 0) break;
      }
    }
    return;
  }
  const int64_t tile_t = 48;
  const int64_t kc = 1024;
  for (int64_t t0 = 0; t0 < t; t0 += tile_t) {
    const int64_t tn = t - t0 < tile_t ? t - t0 : tile_t;
    for (int64_t k0 = 0; k0 < k || k0 == 0; k0 += kc) {
      const int64_t kn = k - k0 < kc ? k - k0 : kc;
      for (int64_t r = r0; r < r1; r += kFR) {
        const int64_t rn = r1 - r < kFR ? r1 - r : kFR;
        for (int64_t j = 0; j < tn; j += kFN) {
          const int64_t nn = tn - j < kFN ? tn - j : kFN;
          kMicro[rn - 1][nn - 1](w + r * ldw + k0, ldw, x + (t0 + j) * ldx + k0, ldx, kn, y + (t0 + j) * ldy + r, ldy,
                                 k0 > 0);
        }
      }
      if (k == 0) break;
    }
  }
}

}  // namespace

}  // namespace k3::avx512
