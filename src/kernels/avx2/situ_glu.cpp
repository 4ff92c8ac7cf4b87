// AVX2 fused SiTU-GLU (k3-architecture.md §3.4): out = β1·tanh(g/β1)·σ(g)·β2·tanh(u/β2).
// exp: Cephes-style range reduction + degree-5 polynomial (≈1 ulp on [-87, 88], clamped outside);
// tanh: odd polynomial for |y| < 0.625 (no cancellation near 0), 1 − 2/(e^{2|y|}+1) elsewhere.
#include "kernels/avx2/avx2_kernels.h"
#include "kernels/avx2/avx2_util.h"

#include <math.h>

namespace k3::avx2 {

namespace {

inline __m256 exp_ps(__m256 x) {
  // Clamp with x as the second operand: maxps/minps return it when it is NaN, so NaN propagates.
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x));
  const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

inline __m256 tanh_ps(__m256 y) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 a = _mm256_andnot_ps(sign, y);
  const __m256 z = _mm256_mul_ps(y, y);
  __m256 p = _mm256_set1_ps(-5.70498872745e-3f);
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036e-1f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422e-1f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), y, y);
  const __m256 ex = exp_ps(_mm256_add_ps(a, a));
  const __m256 big_abs =
      _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(ex, _mm256_set1_ps(1.0f))));
  const __m256 big = _mm256_or_ps(big_abs, _mm256_and_ps(sign, y));
  return _mm256_blendv_ps(big, small, _mm256_cmp_ps(a, _mm256_set1_ps(0.625f), _CMP_LT_OQ));
}

}  // namespace

void situ_glu(const float* g, const float* u, float* out, int64_t n, float beta1, float beta2) {
  const __m256 b1 = _mm256_set1_ps(beta1), ib1 = _mm256_set1_ps(1.0f / beta1);
  const bool has_b2 = beta2 > 0.f;
  const __m256 b2 = _mm256_set1_ps(beta2), ib2 = _mm256_set1_ps(has_b2 ? 1.0f / beta2 : 0.f);
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 gv = _mm256_loadu_ps(g + i), uv = _mm256_loadu_ps(u + i);
    const __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), gv))));
    const __m256 gate = _mm256_mul_ps(_mm256_mul_ps(b1, tanh_ps(_mm256_mul_ps(gv, ib1))), sig);
    const __m256 up = has_b2 ? _mm256_mul_ps(b2, tanh_ps(_mm256_mul_ps(uv, ib2))) : uv;
    _mm256_storeu_ps(out + i, _mm256_mul_ps(gate, up));
  }
  for (; i < n; ++i) {
    const float gi = g[i];
    const float sig = 1.f / (1.f + expf(-gi));
    const float up = has_b2 ? beta2 * tanhf(u[i] / beta2) : u[i];
    out[i] = beta1 * tanhf(gi / beta1) * sig * up;
  }
}

}  // namespace k3::avx2
