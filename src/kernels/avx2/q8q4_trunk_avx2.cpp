// AVX2+FMA rows of matmul_quant (kernels/q8q4_trunk.h): per group of 32 the weights are decoded
// to 4 x 8 fp32 (d·q) once per tile of up to 4 tokens; each token keeps two accumulators
// (groups' halves alternate), summed horizontally at the end of the row — the same order for a
// token whatever its tile-mates, so results do not depend on the token count (Q8 groups are
// gathered from the tiled layout). Also the AVX2 int8 kernel gemm_q8_q8 (kernel_table.h): the
// same exact integer block sums and fp32 chain as the scalar and AVX-512 ones.
#include <immintrin.h>

#include <cstring>

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
  const __m256 d = _mm256_set1_ps(m.scale(r, g));
  if (m.kind == QuantKind::Q8) {
    // Tiled (q8q4_trunk.h): the 8 dwords of (r, g) lie 64 bytes apart, in nibble order
    // (positions 0-15 = even elements, 16-31 = odd ones).
    const int8_t* p = m.q.data() + m.q8_index(r, g * 32);
    const __m256i pos = _mm256_i32gather_epi32(reinterpret_cast<const int*>(p),
                                               _mm256_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448), 1);
    const __m128i ev = _mm256_castsi256_si128(pos), od = _mm256_extracti128_si256(pos, 1);
    const __m128i e0 = _mm_unpacklo_epi8(ev, od), e1 = _mm_unpackhi_epi8(ev, od);  // elements 0-15, 16-31
    w[0] = _mm256_mul_ps(d, cvt8(e0));
    w[1] = _mm256_mul_ps(d, cvt8(_mm_srli_si128(e0, 8)));
    w[2] = _mm256_mul_ps(d, cvt8(e1));
    w[3] = _mm256_mul_ps(d, cvt8(_mm_srli_si128(e1, 8)));
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

namespace {

/// Rows of one 16-row tile, N tokens: ymm lanes = 8 rows (half h of the tile), int32 block sums
/// from vpmaddubsw(|x|, sign(x)·w) (pairs <= 2·127·127, no saturation) and vpmaddwd.
template <int N>
void q8q8_tile(const int8_t* wt, const float* dt, int64_t G, int64_t K, const int8_t* xq, const float* xs, float* out) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int h = 0; h < 2; ++h) {
    __m256 acc[N];
    for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < G; ++b) {
      __m256i ia[N];
      for (int t = 0; t < N; ++t) ia[t] = _mm256_setzero_si256();
      for (int j = 0; j < 8; ++j) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wt + (b * 8 + j) * 64 + 32 * h));
        for (int t = 0; t < N; ++t) {
          int32_t xd;
          std::memcpy(&xd, xq + t * K + b * 32 + 4 * j, 4);
          const __m256i xb = _mm256_set1_epi32(xd);
          const __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(xb), _mm256_sign_epi8(w, xb));
          ia[t] = _mm256_add_epi32(ia[t], _mm256_madd_epi16(p16, ones));
        }
      }
      const __m256 dv = _mm256_loadu_ps(dt + b * 16 + 8 * h);
      for (int t = 0; t < N; ++t)
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[t]), _mm256_mul_ps(dv, _mm256_set1_ps(xs[t * G + b])), acc[t]);
    }
    for (int t = 0; t < N; ++t) _mm256_storeu_ps(out + t * 16 + 8 * h, acc[t]);
  }
}

}  // namespace

void gemm_q8_q8_avx2(const QuantMatrix& w, const int8_t* xq, const float* xs, const int32_t* /*xsum*/, int64_t T,
                     float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t G = w.cols / 32, K = w.cols;
  constexpr int NT = 4;
  alignas(32) float out[NT * 16];
  for (int64_t r = r0; r < r1; r += 16) {
    const int8_t* wt = w.q.data() + r * K;
    const float* dt = w.d.data() + r * G;
    const int64_t nr = r1 - r < 16 ? r1 - r : 16;
    for (int64_t t0 = 0; t0 < T; t0 += NT) {
      const int nt = static_cast<int>(T - t0 < NT ? T - t0 : NT);
      const int8_t* x = xq + t0 * K;
      const float* s = xs + t0 * G;
      switch (nt) {
        case 1: q8q8_tile<1>(wt, dt, G, K, x, s, out); break;
        case 2: q8q8_tile<2>(wt, dt, G, K, x, s, out); break;
        case 3: q8q8_tile<3>(wt, dt, G, K, x, s, out); break;
        default: q8q8_tile<4>(wt, dt, G, K, x, s, out); break;
      }
      for (int t = 0; t < nt; ++t) std::memcpy(y + (t0 + t) * ldy + r, out + t * 16, static_cast<size_t>(nr) * 4);
    }
  }
}

}  // namespace k3::detail
