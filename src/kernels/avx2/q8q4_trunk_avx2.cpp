// AVX2+FMA rows of matmul_quant (kernels/q8q4_trunk.h): per group of 32 the weights are decoded
// to 4 x 8 fp32 (d·q) once per tile of up to 4 tokens; each token keeps two accumulators
// (groups' halves alternate), summed horizontally at the end of the row — the same order for a
// token whatever its tile-mates, so results do not depend on the token count.
#include <immintrin.h>

#include "kernels/q8q4_trunk.h"

namespace k3::detail {

namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256 cvt8(__m128i b8) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b8)); }

/// Decodes group g of row r: w[0..3] = d · q over elements 0-7, 8-15, 16-23, 24-31.
inline void decode_group(const QuantMatrix& m, int64_t r, int64_t g, __m256 w[4]) {
  const __m256 d = _mm256_set1_ps(m.d[static_cast<size_t>(r * (m.cols / 32) + g)]);
  if (m.kind == QuantKind::Q8) {
    const int8_t* p = m.q.data() + r * m.cols + g * 32;
    for (int k = 0; k < 4; ++k)
      w[k] = _mm256_mul_ps(d, cvt8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * k))));
  } else {
    const int8_t* p = m.q.data() + (r * m.cols + g * 32) / 2;
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));  // 32 nibbles
    const __m128i mask = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    const __m128i lo = _mm_and_si128(bytes, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
    // element order: lo0 hi0 lo1 hi1 ...; 4-bit two's complement -> int8: (v ^ 8) - 8
    const __m128i e0 = _mm_sub_epi8(_mm_xor_si128(_mm_unpacklo_epi8(lo, hi), eight), eight);  // elements 0..15
    const __m128i e1 = _mm_sub_epi8(_mm_xor_si128(_mm_unpackhi_epi8(lo, hi), eight), eight);  // 16..31
    w[0] = _mm256_mul_ps(d, cvt8(e0));
    w[1] = _mm256_mul_ps(d, cvt8(_mm_srli_si128(e0, 8)));
    w[2] = _mm256_mul_ps(d, cvt8(e1));
    w[3] = _mm256_mul_ps(d, cvt8(_mm_srli_si128(e1, 8)));
  }
}

}  // namespace

void quant_rows_avx2(const QuantMatrix& m, const float* x, int64_t T, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t G = m.cols / 32, C = m.cols;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t t0 = 0; t0 < T; t0 += 4) {
      const int nt = static_cast<int>(T - t0 < 4 ? T - t0 : 4);
      __m256 a[4][2];
      for (int t = 0; t < 4; ++t) a[t][0] = a[t][1] = _mm256_setzero_ps();
      for (int64_t g = 0; g < G; ++g) {
        __m256 w[4];
        decode_group(m, r, g, w);
        for (int t = 0; t < nt; ++t) {
          const float* xt = x + (t0 + t) * C + g * 32;
          a[t][0] = _mm256_fmadd_ps(w[0], _mm256_loadu_ps(xt), a[t][0]);
          a[t][1] = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(xt + 8), a[t][1]);
          a[t][0] = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(xt + 16), a[t][0]);
          a[t][1] = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(xt + 24), a[t][1]);
        }
      }
      for (int t = 0; t < nt; ++t) y[(t0 + t) * ldy + r] = hsum(_mm256_add_ps(a[t][0], a[t][1]));
    }
}

}  // namespace k3::detail
