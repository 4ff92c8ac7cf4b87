// AVX2 MXFP4 GEMV/GEMM on the packed bytes (algorithms.md §5.3), never dequantizing a matrix.
// Integer route: a block's 16 bytes -> 32 nibbles (low nibbles then high nibbles, matching the
// Q8 "nibble order"), vpshufb through the doubled-E2M1 table T2 (signed) and |T2| (unsigned),
// the weight sign moved onto the activation (vpsignb), vpmaddubsw (pairs <= 2·12·127, no int16
// overflow) + vpmaddwd -> 8 int32 partial sums, converted once per block and scaled by
// s_a·2^(e-128). Exact route (reference): the same decode widened to fp32 and FMA with fp32 x.
// Tokens (T > 1) reuse one decoded block for up to 4 tokens.
#include "kernels/avx2/avx2_kernels.h"
#include "kernels/avx2/avx2_util.h"

namespace k3::avx2 {

namespace {

inline __m256i t2_table() {
  return _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1, 2, 3, 4,
                          6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
}
inline __m256i t2_abs_table() {
  return _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8,
                          12, 0, 1, 2, 3, 4, 6, 8, 12);
}
// 32 nibbles of one block: lanes 0..15 = low nibbles (even columns), 16..31 = high (odd).
inline __m256i nibbles(const uint8_t* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i v = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}
inline __m256 block_dot(__m256i aw, __m256i w, const int8_t* qp) {
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qp));
  const __m256i p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(a, w));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

float row_q8_1(const uint8_t* pr, const uint8_t* sr, int64_t nb, const int8_t* q, const float* qs) {
  const __m256i tab = t2_table(), tabs = t2_abs_table();
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m256i n0 = nibbles(pr + 16 * b), n1 = nibbles(pr + 16 * b + 16);
    const __m256 d0 = block_dot(_mm256_shuffle_epi8(tabs, n0), _mm256_shuffle_epi8(tab, n0), q + 32 * b);
    const __m256 d1 =
        block_dot(_mm256_shuffle_epi8(tabs, n1), _mm256_shuffle_epi8(tab, n1), q + 32 * b + 32);
    acc0 = _mm256_fmadd_ps(d0, _mm256_set1_ps(e8m0_half(sr[b]) * qs[b]), acc0);
    acc1 = _mm256_fmadd_ps(d1, _mm256_set1_ps(e8m0_half(sr[b + 1]) * qs[b + 1]), acc1);
  }
  if (b < nb) {
    const __m256i n0 = nibbles(pr + 16 * b);
    const __m256 d0 = block_dot(_mm256_shuffle_epi8(tabs, n0), _mm256_shuffle_epi8(tab, n0), q + 32 * b);
    acc0 = _mm256_fmadd_ps(d0, _mm256_set1_ps(e8m0_half(sr[b]) * qs[b]), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

template <int N>
void row_q8_n(const uint8_t* pr, const uint8_t* sr, int64_t nb, int64_t k, const int8_t* q,
              const float* qs, float* y, int64_t ldy) {
  const __m256i tab = t2_table(), tabs = t2_abs_table();
  __m256 acc[N];
  for (int n = 0; n < N; ++n) acc[n] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i nib = nibbles(pr + 16 * b);
    const __m256i w = _mm256_shuffle_epi8(tab, nib), aw = _mm256_shuffle_epi8(tabs, nib);
    const float ws = e8m0_half(sr[b]);
    for (int n = 0; n < N; ++n) {
      const __m256 d = block_dot(aw, w, q + n * k + 32 * b);
      acc[n] = _mm256_fmadd_ps(d, _mm256_set1_ps(ws * qs[n * nb + b]), acc[n]);
    }
  }
  for (int n = 0; n < N; ++n) y[n * ldy] = hsum(acc[n]);
}

template <int N>
void row_f32_n(const uint8_t* pr, const uint8_t* sr, int64_t nb, const float* x, int64_t ldx,
               float* y, int64_t ldy) {
  const __m256i tab = t2_table();
  __m256 acc[N];
  for (int n = 0; n < N; ++n) acc[n] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i w = _mm256_shuffle_epi8(tab, nibbles(pr + 16 * b));
    const __m128i lo = _mm256_castsi256_si128(w), hi = _mm256_extracti128_si256(w, 1);
    const __m128i c0 = _mm_unpacklo_epi8(lo, hi), c1 = _mm_unpackhi_epi8(lo, hi);  // natural order
    const __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c0));
    const __m256 f1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(c0, 8)));
    const __m256 f2 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c1));
    const __m256 f3 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(c1, 8)));
    const __m256 ws = _mm256_set1_ps(e8m0_half(sr[b]));
    for (int n = 0; n < N; ++n) {
      const float* xb = x + n * ldx + 32 * b;
      __m256 blk = _mm256_mul_ps(f0, _mm256_loadu_ps(xb));
      blk = _mm256_fmadd_ps(f1, _mm256_loadu_ps(xb + 8), blk);
      blk = _mm256_fmadd_ps(f2, _mm256_loadu_ps(xb + 16), blk);
      blk = _mm256_fmadd_ps(f3, _mm256_loadu_ps(xb + 24), blk);
      acc[n] = _mm256_fmadd_ps(blk, ws, acc[n]);
    }
  }
  for (int n = 0; n < N; ++n) y[n * ldy] = hsum(acc[n]);
}

}  // namespace

void gemm_mxfp4_q8(const uint8_t* packed, const uint8_t* scale, int64_t k, const int8_t* q,
                   const float* qs, int64_t t, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t nb = k / 32;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* pr = packed + r * (k / 2);
    const uint8_t* sr = scale + r * nb;
    if (t == 1) {
      y[r] = row_q8_1(pr, sr, nb, q, qs);
      continue;
    }
    int64_t j = 0;
    for (; j + 4 <= t; j += 4) row_q8_n<4>(pr, sr, nb, k, q + j * k, qs + j * nb, y + j * ldy + r, ldy);
    switch (t - j) {
      case 3: row_q8_n<3>(pr, sr, nb, k, q + j * k, qs + j * nb, y + j * ldy + r, ldy); break;
      case 2: row_q8_n<2>(pr, sr, nb, k, q + j * k, qs + j * nb, y + j * ldy + r, ldy); break;
      case 1: row_q8_n<1>(pr, sr, nb, k, q + j * k, qs + j * nb, y + j * ldy + r, ldy); break;
      default: break;
    }
  }
}

void gemm_mxfp4_f32(const uint8_t* packed, const uint8_t* scale, int64_t k, const float* x,
                    int64_t ldx, int64_t t, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t nb = k / 32;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* pr = packed + r * (k / 2);
    const uint8_t* sr = scale + r * nb;
    int64_t j = 0;
    for (; j + 4 <= t; j += 4) row_f32_n<4>(pr, sr, nb, x + j * ldx, ldx, y + j * ldy + r, ldy);
    switch (t - j) {
      case 3: row_f32_n<3>(pr, sr, nb, x + j * ldx, ldx, y + j * ldy + r, ldy); break;
      case 2: row_f32_n<2>(pr, sr, nb, x + j * ldx, ldx, y + j * ldy + r, ldy); break;
      case 1: row_f32_n<1>(pr, sr, nb, x + j * ldx, ldx, y + j * ldy + r, ldy); break;
      default: break;
    }
  }
}

}  // namespace k3::avx2
