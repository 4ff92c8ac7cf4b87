// AVX-512 VNNI int8 kernel of the q8 trunk (kernel_table.h gemm_q8_q8; layout in
// kernels/q8q4_trunk.h): zmm lanes = the 16 rows of a tile; per 32-block, 8 vpdpbusd of a
// 64-byte weight load (4 inputs x 16 rows, made unsigned by q + 128 = q ^ 0x80) with the
// token's 4 activation bytes broadcast, the accumulator started at -128·Σ xq so the block sum is
// the exact Σ q_w·q_x; then acc = fma(float(sum), d·s, acc) per block, as the scalar kernel.
// Up to 8 tokens share each weight load (register tile 16 rows x 8 tokens: 8 int32 + 8 fp32
// accumulators), so T = 1..8 read the weights once from memory.
#include <immintrin.h>

#include <cstring>

#include "kernels/q8q4_trunk.h"

namespace k3::detail {

namespace {

template <int N>
void q8q8_tile(const int8_t* wt, const float* dt, int64_t G, int64_t K, const int8_t* xq, const float* xs,
               const int32_t* xsum, __m512 acc[N]) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int t = 0; t < N; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < G; ++b) {
    __m512i ia[N];
    for (int t = 0; t < N; ++t) ia[t] = _mm512_set1_epi32(-128 * xsum[t * G + b]);
    const int8_t* wb = wt + b * 512;
    for (int j = 0; j < 8; ++j) {
      const __m512i w = _mm512_xor_si512(_mm512_loadu_si512(wb + 64 * j), flip);
      for (int t = 0; t < N; ++t) {
        int32_t xd;
        std::memcpy(&xd, xq + t * K + b * 32 + 4 * j, 4);
        ia[t] = _mm512_dpbusd_epi32(ia[t], w, _mm512_set1_epi32(xd));
      }
    }
    const __m512 dv = _mm512_loadu_ps(dt + b * 16);
    for (int t = 0; t < N; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[t]), _mm512_mul_ps(dv, _mm512_set1_ps(xs[t * G + b])), acc[t]);
  }
}

template <int N>
void run_tile(const int8_t* wt, const float* dt, int64_t G, int64_t K, const int8_t* xq, const float* xs,
              const int32_t* xsum, float* y, int64_t ldy, __mmask16 m) {
  __m512 acc[N];
  q8q8_tile<N>(wt, dt, G, K, xq, xs, xsum, acc);
  for (int t = 0; t < N; ++t) _mm512_mask_storeu_ps(y + t * ldy, m, acc[t]);
}

}  // namespace

void gemm_q8_q8_avx512(const QuantMatrix& w, const int8_t* xq, const float* xs, const int32_t* xsum, int64_t T,
                       float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t G = w.cols / 32, K = w.cols;
  constexpr int NT = 8;
  for (int64_t r = r0; r < r1; r += 16) {
    const int8_t* wt = w.q.data() + r * K;
    const float* dt = w.d.data() + r * G;
    const int64_t nr = r1 - r < 16 ? r1 - r : 16;
    const __mmask16 m = static_cast<__mmask16>((1u << nr) - 1u);
    // T = 9..16 as two halves of <= 8 (no 1-token tail pass over the tile).
    const int64_t step = T > NT && T <= 2 * NT ? (T + 1) / 2 : NT;
    for (int64_t t0 = 0; t0 < T; t0 += step) {
      const int nt = static_cast<int>(T - t0 < step ? T - t0 : step);
      const int8_t* x = xq + t0 * K;
      const float* s = xs + t0 * G;
      const int32_t* sum = xsum + t0 * G;
      float* yt = y + t0 * ldy + r;
      switch (nt) {
        case 1: run_tile<1>(wt, dt, G, K, x, s, sum, yt, ldy, m); break;
        case 2: run_tile<2>(wt, dt, G, K, x, s, sum, yt, ldy, m); break;
        case 3: run_tile<3>(wt, dt, G, K, x, s, sum, yt, ldy, m); break;
        case 4: run_tile<4>(wt, dt, G, K, x, s, sum, yt, ldy, m); break;
        case 5: run_tile<5>(wt, dt, G, K, x, s, sum, yt, ldy, m); break;
        case 6: run_tile<6>(wt, dt, G, K, x, s, sum, yt, ldy, m); break;
        case 7: run_tile<7>(wt, dt, G, K, x, s, sum, yt, ldy, m); break;
        default: run_tile<8>(wt, dt, G, K, x, s, sum, yt, ldy, m); break;
      }
    }
  }
}

}  // namespace k3::detail
