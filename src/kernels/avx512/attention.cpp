// AVX-512 builds of the two attention primitives of k3::vec (vec.h gemm_nn, softmax_online), the
// inner loops of the tiled MLA prefill (kernels/mla_attend.cpp) and the vision tower's attention:
// 16-lane vectors where the shared vec_impl.h build has 8. gemm_nn keeps vec_impl.h's numerics
// exactly (each C element one fp32 FMA chain over k in order, then + C when accumulating), so its
// results are the AVX2 build's bits; softmax_online uses the same Cephes exp (vec_impl.h exp_v)
// with 16 lanes and 2 partial sums, so its sums round differently from the 8-lane build.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/avx512/avx512_kernels.h"

namespace k3::avx512 {
namespace {

inline __mmask16 tail_mask(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u); }

// C[i0 + r, j0 .. j0 + nj) for r < MR, nj <= 32: one FMA chain per element over k.
template <int MR>
inline void gemm_tile(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t nj,
                      int64_t k, bool accumulate) {
  const __mmask16 m0 = tail_mask(nj), m1 = tail_mask(nj > 16 ? nj - 16 : 0);
  __m512 acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* br = b + kk * ldb;
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, br), b1 = _mm512_maskz_loadu_ps(m1, br + 16);
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * lda + kk]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    float* cr = c + r * ldc;
    __m512 v0 = acc[r][0], v1 = acc[r][1];
    if (accumulate) {
      v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, cr), v0);
      v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, cr + 16), v1);
    }
    _mm512_mask_storeu_ps(cr, m0, v0);
    if (m1) _mm512_mask_storeu_ps(cr + 16, m1, v1);
  }
}

// The 8-row tile with its 16 accumulators as named variables (GCC keeps an array of them in
// memory, storing every one on each k step). Same chains as gemm_tile<8>.
inline void gemm_tile8(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t nj,
                       int64_t k, bool accumulate) {
  const __mmask16 m0 = tail_mask(nj), m1 = tail_mask(nj > 16 ? nj - 16 : 0);
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
         c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
  const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda, *a4 = a + 4 * lda, *a5 = a + 5 * lda,
              *a6 = a + 6 * lda, *a7 = a + 7 * lda;
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* br = b + kk * ldb;
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, br), b1 = _mm512_maskz_loadu_ps(m1, br + 16);
    __m512 av = _mm512_set1_ps(a0[kk]);
    c00 = _mm512_fmadd_ps(av, b0, c00), c01 = _mm512_fmadd_ps(av, b1, c01);
    av = _mm512_set1_ps(a1[kk]);
    c10 = _mm512_fmadd_ps(av, b0, c10), c11 = _mm512_fmadd_ps(av, b1, c11);
    av = _mm512_set1_ps(a2[kk]);
    c20 = _mm512_fmadd_ps(av, b0, c20), c21 = _mm512_fmadd_ps(av, b1, c21);
    av = _mm512_set1_ps(a3[kk]);
    c30 = _mm512_fmadd_ps(av, b0, c30), c31 = _mm512_fmadd_ps(av, b1, c31);
    av = _mm512_set1_ps(a4[kk]);
    c40 = _mm512_fmadd_ps(av, b0, c40), c41 = _mm512_fmadd_ps(av, b1, c41);
    av = _mm512_set1_ps(a5[kk]);
    c50 = _mm512_fmadd_ps(av, b0, c50), c51 = _mm512_fmadd_ps(av, b1, c51);
    av = _mm512_set1_ps(a6[kk]);
    c60 = _mm512_fmadd_ps(av, b0, c60), c61 = _mm512_fmadd_ps(av, b1, c61);
    av = _mm512_set1_ps(a7[kk]);
    c70 = _mm512_fmadd_ps(av, b0, c70), c71 = _mm512_fmadd_ps(av, b1, c71);
  }
  auto put = [&](int r, __m512 v0, __m512 v1) {
    float* cr = c + r * ldc;
    if (accumulate) {
      v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, cr), v0);
      v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, cr + 16), v1);
    }
    _mm512_mask_storeu_ps(cr, m0, v0);
    if (m1) _mm512_mask_storeu_ps(cr + 16, m1, v1);
  };
  put(0, c00, c01), put(1, c10, c11), put(2, c20, c21), put(3, c30, c31);
  put(4, c40, c41), put(5, c50, c51), put(6, c60, c61), put(7, c70, c71);
}

// e^x per lane, vec_impl.h exp_v's formula (Cephes expf: ln2 split in two constants, degree-6
// polynomial, 2^n as two factors; x <= ln FLT_MIN gives 0, x > ln FLT_MAX gives inf, NaN stays).
inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.3365447505531f), magic = _mm512_set1_ps(12582912.f);
  const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LE_OQ);
  __m512 xc = _mm512_mask_blend_ps(under, x, lo);
  xc = _mm512_min_ps(_mm512_set1_ps(88.8f), xc);  // a NaN xc (the second operand) passes
  const __m512 t = _mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), magic);
  const __m512 fn = _mm512_sub_ps(t, magic);
  const __m512i n = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_castps_si512(magic));
  __m512 r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  const __m512i h = _mm512_srai_epi32(n, 1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 f1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(h, bias), 23));
  const __m512 f2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_sub_epi32(n, h), bias), 23));
  const __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, f1), f2);
  return _mm512_mask_blend_ps(under, y, _mm512_setzero_ps());
}

}  // namespace

void gemm_nn(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t n,
             int64_t k, bool accumulate) {
  for (int64_t j0 = 0; j0 < n; j0 += 32) {  // the B panel [k, 32] stays in L1 while the rows pass
    const int64_t nj = n - j0 < 32 ? n - j0 : 32;
    int64_t i0 = 0;
    for (; i0 + 8 <= m; i0 += 8) gemm_tile8(a + i0 * lda, lda, b + j0, ldb, c + i0 * ldc + j0, ldc, nj, k, accumulate);
    if (i0 + 4 <= m) {
      gemm_tile<4>(a + i0 * lda, lda, b + j0, ldb, c + i0 * ldc + j0, ldc, nj, k, accumulate);
      i0 += 4;
    }
    switch (m - i0) {
      case 3: gemm_tile<3>(a + i0 * lda, lda, b + j0, ldb, c + i0 * ldc + j0, ldc, nj, k, accumulate); break;
      case 2: gemm_tile<2>(a + i0 * lda, lda, b + j0, ldb, c + i0 * ldc + j0, ldc, nj, k, accumulate); break;
      case 1: gemm_tile<1>(a + i0 * lda, lda, b + j0, ldb, c + i0 * ldc + j0, ldc, nj, k, accumulate); break;
      default: break;
    }
  }
}

float softmax_online(float* x, int64_t n_vis, int64_t n, float* m_run, float* l_run) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 mv = ninf;
  for (int64_t i = 0; i < n_vis; i += 16) mv = _mm512_max_ps(mv, _mm512_mask_loadu_ps(ninf, tail_mask(n_vis - i), x + i));
  const float mx = _mm512_reduce_max_ps(mv);
  const float m_old = *m_run;
  const float m_new = m_old > mx ? m_old : mx;
  const __m512 mn = _mm512_set1_ps(m_new);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n_vis; i += 32) {
    const __m512 e0 = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), mn));
    const __m512 e1 = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), mn));
    _mm512_storeu_ps(x + i, e0);
    _mm512_storeu_ps(x + i + 16, e1);
    acc0 = _mm512_add_ps(acc0, e0);
    acc1 = _mm512_add_ps(acc1, e1);
  }
  for (; i < n_vis; i += 16) {
    const __mmask16 mk = tail_mask(n_vis - i);
    const __m512 e = _mm512_maskz_mov_ps(mk, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, x + i), mn)));
    _mm512_mask_storeu_ps(x + i, mk, e);
    acc0 = _mm512_add_ps(acc0, e);
  }
  for (i = n_vis; i < n; ++i) x[i] = 0.0f;
  const float alpha = _mm512_cvtss_f32(exp16(_mm512_set1_ps(m_old - m_new)));  // e^{-inf} = 0 on the first step
  *l_run = *l_run * alpha + _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
  *m_run = m_new;
  return alpha;
}

}  // namespace k3::avx512
