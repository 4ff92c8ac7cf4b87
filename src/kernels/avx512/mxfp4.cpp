// AVX-512 MXFP4 GEMV/GEMM on the packed bytes (algorithms.md §5.3) with VNNI.
// Two 32-blocks per zmm: 32 packed bytes -> 64 nibbles arranged [lo b0 | hi b0 | lo b1 | hi b1]
// (128-bit lanes; matches the Q8 nibble order of two consecutive blocks), vpshufb through |T2|
// (unsigned operand) and T2 (its sign mask, vpmovb2m), the sign moved onto the activation with a
// masked subtract, vpdpbusd -> int32 lanes 0..7 = block 0, 8..15 = block 1; one fp32 convert and
// FMA per pair of blocks with the scale vector [s0 x8 | s1 x8]. Exact route: decode to fp32 + FMA.
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/avx512_util.h"

namespace k3::avx512 {

namespace {

inline __m512i t2_table() {
  return _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
}
inline __m512i t2_abs_table() {
  return _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12));
}
// Nibbles of two consecutive blocks (32 packed bytes; `two` false: the second block is zero).
inline __m512i nibbles2(const uint8_t* p, bool two) {
  const __m256i raw = two ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                          : _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
  const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);  // [lo0 lo1 hi0 hi1]
  return _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0));               // [lo0 hi0 lo1 hi1]
}
inline __m512 pair_dot(__m512i aw, __mmask64 neg, const int8_t* qp, bool two) {
  const __m512i a = two ? _mm512_loadu_si512(qp) : _mm512_maskz_loadu_epi8(0xFFFFFFFFull, qp);
  const __m512i sa = _mm512_mask_sub_epi8(a, neg, _mm512_setzero_si512(), a);
  return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), aw, sa));
}
inline __m512 pair_scale(float s0, float s1) {
  return _mm512_mask_blend_ps(__mmask16(0xFF00), _mm512_set1_ps(s0), _mm512_set1_ps(s1));
}

template <int N>
void row_q8(const uint8_t* pr, const uint8_t* sr, int64_t nb, int64_t k, const int8_t* q,
            const float* qs, float* y, int64_t ldy) {
  const __m512i tab = t2_table(), tabs = t2_abs_table();
  __m512 acc[N];
  for (int n = 0; n < N; ++n) acc[n] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b += 2) {
    const bool two = b + 1 < nb;
    const __m512i nib = nibbles2(pr + 16 * b, two);
    const __m512i aw = _mm512_shuffle_epi8(tabs, nib);
    const __mmask64 neg = _mm512_movepi8_mask(_mm512_shuffle_epi8(tab, nib));
    const float w0 = e8m0_half(sr[b]), w1 = two ? e8m0_half(sr[b + 1]) : 0.f;
    for (int n = 0; n < N; ++n) {
      const float* s = qs + n * nb + b;
      const __m512 d = pair_dot(aw, neg, q + n * k + 32 * b, two);
      acc[n] = _mm512_fmadd_ps(d, pair_scale(w0 * s[0], two ? w1 * s[1] : 0.f), acc[n]);
    }
  }
  for (int n = 0; n < N; ++n) y[n * ldy] = _mm512_reduce_add_ps(acc[n]);
}

template <int N>
void row_f32(const uint8_t* pr, const uint8_t* sr, int64_t nb, const float* x, int64_t ldx,
             float* y, int64_t ldy) {
  const __m256i tab = _mm256_broadcastsi128_si256(
      _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
  __m512 acc[N];
  for (int n = 0; n < N; ++n) acc[n] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pr + 16 * b));
    const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw),
                                         _mm256_set1_epi8(0x0F));
    const __m256i w = _mm256_shuffle_epi8(tab, nib);
    const __m128i lo = _mm256_castsi256_si128(w), hi = _mm256_extracti128_si256(w, 1);
    const __m512 f0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_unpacklo_epi8(lo, hi)));
    const __m512 f1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_unpackhi_epi8(lo, hi)));
    const __m512 ws = _mm512_set1_ps(e8m0_half(sr[b]));
    for (int n = 0; n < N; ++n) {
      const float* xb = x + n * ldx + 32 * b;
      const __m512 blk = _mm512_fmadd_ps(f1, _mm512_loadu_ps(xb + 16), _mm512_mul_ps(f0, _mm512_loadu_ps(xb)));
      acc[n] = _mm512_fmadd_ps(blk, ws, acc[n]);
    }
  }
  for (int n = 0; n < N; ++n) y[n * ldy] = _mm512_reduce_add_ps(acc[n]);
}

}  // namespace

void gemm_mxfp4_q8(const uint8_t* packed, const uint8_t* scale, int64_t k, const int8_t* q,
                   const float* qs, int64_t t, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t nb = k / 32;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* pr = packed + r * (k / 2);
    const uint8_t* sr = scale + r * nb;
    int64_t j = 0;
    for (; j + 4 <= t; j += 4) row_q8<4>(pr, sr, nb, k, q + j * k, qs + j * nb, y + j * ldy + r, ldy);
    switch (t - j) {
      case 3: row_q8<3>(pr, sr, nb, k, q + j * k, qs + j * nb, y + j * ldy + r, ldy); break;
      case 2: row_q8<2>(pr, sr, nb, k, q + j * k, qs + j * nb, y + j * ldy + r, ldy); break;
      case 1: row_q8<1>(pr, sr, nb, k, q + j * k, qs + j * nb, y + j * ldy + r, ldy); break;
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
    for (; j + 4 <= t; j += 4) row_f32<4>(pr, sr, nb, x + j * ldx, ldx, y + j * ldy + r, ldy);
    switch (t - j) {
      case 3: row_f32<3>(pr, sr, nb, x + j * ldx, ldx, y + j * ldy + r, ldy); break;
      case 2: row_f32<2>(pr, sr, nb, x + j * ldx, ldx, y + j * ldy + r, ldy); break;
      case 1: row_f32<1>(pr, sr, nb, x + j * ldx, ldx, y + j * ldy + r, ldy); break;
      default: break;
    }
  }
}

}  // namespace k3::avx512
