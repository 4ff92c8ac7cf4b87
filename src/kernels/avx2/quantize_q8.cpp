// AVX2 Q8 quantization of an activation row (per 32-block, Q8_0 style, nibble order; see
// kernel_table.h). Bit-identical to the scalar kernel: same float ops (x·(127/amax), RNE).
#include "kernels/avx2/avx2_kernels.h"
#include "kernels/avx2/avx2_util.h"

namespace k3::avx2 {

void quantize_q8(const float* x, int64_t n, int8_t* q, float* s) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 fmax = _mm256_set1_ps(3.402823466e38f);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + 32 * b;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    int bad = 0;
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      const __m256 a = _mm256_andnot_ps(sign, v[i]);
      bad |= _mm256_movemask_ps(_mm256_cmp_ps(a, fmax, _CMP_NLE_UQ));  // > FLT_MAX or NaN
      amax = _mm256_max_ps(amax, a);
    }
    int8_t* qb = q + 32 * b;
    if (bad) {
      s[b] = bits_to_f32(0x7fc00000u);
      for (int i = 0; i < 32; ++i) qb[i] = 0;
      continue;
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float am = _mm_cvtss_f32(m);
    const float inv = am > 0.f ? 127.f / am : 0.f;
    s[b] = am / 127.f;
    alignas(32) int32_t iv[32];
    const __m256 vinv = _mm256_set1_ps(inv);
    for (int i = 0; i < 4; ++i)
      _mm256_store_si256(reinterpret_cast<__m256i*>(iv + 8 * i), _mm256_cvtps_epi32(_mm256_mul_ps(v[i], vinv)));
    for (int p = 0; p < 16; ++p) {
      qb[p] = static_cast<int8_t>(iv[2 * p]);
      qb[16 + p] = static_cast<int8_t>(iv[2 * p + 1]);
    }
  }
}

}  // namespace k3::avx2
