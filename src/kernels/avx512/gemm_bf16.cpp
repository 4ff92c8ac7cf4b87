// AVX-512 BF16 GEMV/GEMM: Y[t, r] = Σ_k W[r, k]·X[t, k], W bf16 [rows, K], X fp32 [T, K].
// Same structure as the AVX2 kernel with 16 lanes: bf16 -> fp32 by vpmovzxwd + vpslld, fp32
// FMA, register block 4 rows x 6 tokens (24 accumulators of 32 registers; decode: 4 rows x 1),
// masked tails (no scalar remainder loop). Tokens tiled by 48, K blocked by 1024 for T > 1.
// Opt-in (K3_BF16_DOT=1), every T (decode too, so batching changes no bit) uses AVX512_BF16 instead: each 48-token x 1024 tile of X is rounded once to
// bf16 (RNE, vcvtne2ps2bf16) and vdpbf16ps multiplies 32 weight/activation pairs per instruction
// with fp32 accumulation (2x the FMA path's multiplies per instruction, no bf16->fp32 widening).
// Error: the activation rounding, |err| <= 2^-8·Σ|w·x| (bound tested in gemm_bf16_test.cpp).
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/avx512_util.h"

#include <cstdlib>

namespace k3::avx512 {

namespace {

template <int R, int N>
void micro(const uint16_t* w, int64_t ldw, const float* x, int64_t ldx, int64_t kn, float* y,
           int64_t ldy, bool accumulate) {
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

using MicroFn = void (*)(const uint16_t*, int64_t, const float*, int64_t, int64_t, float*, int64_t,
                         bool);
constexpr int kR = 4, kN = 4;  // the bf16-dot path's block; T == 1 FMA: 4-row groups
// FMA path for T > 1: 4 rows x 6 tokens (24 FMAs per 4 bf16 conversions and 10 loads; 1.3x the
// 4 x 4 block at T = 16, k3_bench_gemm_tokens; 3 x 8 was slower: more X loads per FMA). Every
// output's arithmetic is the same for any block shape, so results do not change.
constexpr int kFR = 4, kFN = 6;
void gemm_fma(const uint16_t* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t t,
              float* y, int64_t ldy, int64_t r0, int64_t r1);

constexpr MicroFn kMicro1[kR] = {micro<1, 1>, micro<2, 1>, micro<3, 1>, micro<4, 1>};
constexpr MicroFn kMicro[kFR][kFN] = {
    {micro<1, 1>, micro<1, 2>, micro<1, 3>, micro<1, 4>, micro<1, 5>, micro<1, 6>},
    {micro<2, 1>, micro<2, 2>, micro<2, 3>, micro<2, 4>, micro<2, 5>, micro<2, 6>},
    {micro<3, 1>, micro<3, 2>, micro<3, 3>, micro<3, 4>, micro<3, 5>, micro<3, 6>},
    {micro<4, 1>, micro<4, 2>, micro<4, 3>, micro<4, 4>, micro<4, 5>, micro<4, 6>},
};

// R rows x N tokens with vdpbf16ps over kp (multiple of 32) bf16 elements; X already bf16.
template <int R, int N>
void micro_dp(const uint16_t* w, int64_t ldw, const uint16_t* xb, int64_t ldxb, int64_t kn,
              float* y, int64_t ldy, bool accumulate) {
  __m512 acc[R][N];
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) acc[r][n] = _mm512_setzero_ps();
  for (int64_t i = 0; i < kn; i += 32) {
    const __mmask32 m = tail_mask32(kn - i);
    __m512i xv[N];
    for (int n = 0; n < N; ++n) xv[n] = _mm512_loadu_si512(xb + n * ldxb + i);  // zero-padded
    for (int r = 0; r < R; ++r) {
      const __m512i wv = _mm512_maskz_loadu_epi16(m, w + r * ldw + i);
      for (int n = 0; n < N; ++n) acc[r][n] = _mm512_dpbf16_ps(acc[r][n], (__m512bh)wv, (__m512bh)xv[n]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) {
      const float s = _mm512_reduce_add_ps(acc[r][n]);
      float* d = y + n * ldy + r;
      *d = accumulate ? *d + s : s;
    }
}

using MicroDpFn = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t, float*,
                           int64_t, bool);
constexpr MicroDpFn kMicroDp[kR][kN] = {
    {micro_dp<1, 1>, micro_dp<1, 2>, micro_dp<1, 3>, micro_dp<1, 4>},
    {micro_dp<2, 1>, micro_dp<2, 2>, micro_dp<2, 3>, micro_dp<2, 4>},
    {micro_dp<3, 1>, micro_dp<3, 2>, micro_dp<3, 3>, micro_dp<3, 4>},
    {micro_dp<4, 1>, micro_dp<4, 2>, micro_dp<4, 3>, micro_dp<4, 4>},
};

// X [tn, kn] fp32 (row stride ldx) -> bf16 [tn, ldxb] (RNE), zero-padded to ldxb (multiple of 32).
void round_tile_bf16(const float* x, int64_t ldx, int64_t tn, int64_t kn, uint16_t* xb, int64_t ldxb) {
  for (int64_t n = 0; n < tn; ++n)
    for (int64_t i = 0; i < ldxb; i += 32) {
      const __mmask16 m0 = tail_mask16(kn - i > 0 ? kn - i : 0);
      const __mmask16 m1 = tail_mask16(kn - i - 16 > 0 ? kn - i - 16 : 0);
      const __m512 lo = _mm512_maskz_loadu_ps(m0, x + n * ldx + i);
      const __m512 hi = _mm512_maskz_loadu_ps(m1, x + n * ldx + i + 16);
      _mm512_storeu_si512(xb + n * ldxb + i, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
}

void gemm_dp(const uint16_t* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t t,
             float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t tile_t = 48, kc = 1024;
  uint16_t* xb = static_cast<uint16_t*>(std::malloc(static_cast<size_t>(tile_t * kc) * 2));
  if (xb == nullptr) return gemm_fma(w, ldw, k, x, ldx, t, y, ldy, r0, r1);
  for (int64_t t0 = 0; t0 < t; t0 += tile_t) {
    const int64_t tn = t - t0 < tile_t ? t - t0 : tile_t;
    for (int64_t k0 = 0; k0 < k || k0 == 0; k0 += kc) {
      const int64_t kn = k - k0 < kc ? k - k0 : kc;
      const int64_t kp = (kn + 31) / 32 * 32;
      round_tile_bf16(x + t0 * ldx + k0, ldx, tn, kn, xb, kp);
      for (int64_t r = r0; r < r1; r += kR) {
        const int64_t rn = r1 - r < kR ? r1 - r : kR;
        for (int64_t j = 0; j < tn; j += kN) {
          const int64_t nn = tn - j < kN ? tn - j : kN;
          kMicroDp[rn - 1][nn - 1](w + r * ldw + k0, ldw, xb + j * kp, kp, kn, y + (t0 + j) * ldy + r,
                                   ldy, k0 > 0);
        }
      }
      if (k == 0) break;
    }
  }
  std::free(xb);
}

}  // namespace

// vdpbf16ps rounds the activations to bf16 (≈1e-3 relative error in the logits), which is outside
// the fast path's 1e-5 contract with the fp64 reference; it is therefore opt-in:
// K3_BF16_DOT=1 (read once). Default: the fp32-FMA path for every T.
bool bf16_dot_enabled() {
  static const bool on = [] {
    const char* v = getenv("K3_BF16_DOT");
    return v != nullptr && v[0] == '1' && v[1] == '\0';
  }();
  return on;
}

void gemm_bf16(const uint16_t* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t t,
               float* y, int64_t ldy, int64_t r0, int64_t r1) {
  if (bf16_dot_enabled())  // every T, so that a token's bits do not depend on its batch
    gemm_dp(w, ldw, k, x, ldx, t, y, ldy, r0, r1);
  else
    gemm_fma(w, ldw, k, x, ldx, t, y, ldy, r0, r1);
}

namespace {

void gemm_fma(const uint16_t* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t t,
               float* y, int64_t ldy, int64_t r0, int64_t r1) {
  // Every output is summed in K blocks of 1024 (one horizontal sum per block, blocks added in
  // order), whatever T: a token's outputs are then the same bits alone (decode, T == 1) as in a
  // batch of any size (continuous batching; tests/kernels/batch_invariance_test.cpp). T == 1
  // walks each group of rows through all its K blocks before the next group: rows stream in order.
  if (t == 1) {
    for (int64_t r = r0; r < r1; r += kR) {
      const int64_t rn = r1 - r < kR ? r1 - r : kR;
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
          kMicro[rn - 1][nn - 1](w + r * ldw + k0, ldw, x + (t0 + j) * ldx + k0, ldx, kn,
                                 y + (t0 + j) * ldy + r, ldy, k0 > 0);
        }
      }
      if (k == 0) break;
    }
  }
}

}  // namespace

}  // namespace k3::avx512
