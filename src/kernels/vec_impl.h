// k3::vec algorithms (vec.h), written once and compiled per ISA: scalar/kernels_scalar.cpp (the
// x86-64 baseline: 4-lane SSE2 vectors), avx2/vec.cpp (8 lanes, AVX2; also used by the AVX-512
// table; simd_lanes.h has no 16-lane build). Same pattern as kda_chunk_impl.h: GCC vector
// extensions of the build's native width, so every loop is SIMD without relying on the auto-vectorizer or on fp-reassociation flags.
// Everything has internal linkage (anonymous namespace), as the ISA translation-unit rule of
// kernel_table.h requires; an ISA TU calls vec_fill_table() to put these into its KernelTable.
//
// Numerics (identical formulas on every ISA; only the lane count, hence the order of the fp32
// partial sums of the reductions, differs):
//   - reductions: kUnroll·kLanes fixed partial sums, combined in a fixed order;
//   - exp: Cephes expf (range reduction by ln2 split in two constants, degree-6 polynomial),
//     2^n applied as two factors so n = 128 works; x < ln(FLT_MIN) gives exactly 0 (no
//     subnormal results, so exp(-inf) = 0), x > ln(FLT_MAX) gives +inf, NaN propagates;
//   - σ(x) = x >= 0 ? 1/(1+e) : e/(1+e) with e = exp(−|x|) ∈ [0, 1] (never overflows);
//   - tails: the last n mod kLanes elements are copied into a zero-padded vector and go through
//     the same vector code, so results do not depend on an element's position.
#pragma once
#include <immintrin.h>
#include <math.h>

#include <cstdint>

#include "kernels/kernel_table.h"
#include "kernels/simd_lanes.h"

// The vector types below are passed between internal inline helpers only; GCC's note that their
// ABI differs without AVX concerns external calls, of which there are none.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace k3 {
namespace {
namespace vecimpl {

using simd::fmadd;
using simd::kLanes;
using simd::loadv;
using simd::storev;
using simd::vf;
using simd::vi;
inline constexpr int kUnroll = 4;  // independent accumulator chains in the reductions

// The first m (< kLanes) elements of p, zero-padded.
inline vf load_part(const float* p, int64_t m) {
  float buf[kLanes] = {};
  for (int64_t l = 0; l < m; ++l) buf[l] = p[l];
  return loadv(buf);
}
inline void store_part(float* p, vf x, int64_t m) {
  float buf[kLanes];
  storev(buf, x);
  for (int64_t l = 0; l < m; ++l) p[l] = buf[l];
}
inline vf splat(float a) { return vf{} + a; }
inline float hsum(vf v) {
  float s = v[0];
  for (int l = 1; l < kLanes; ++l) s += v[l];
  return s;
}
inline vf as_f(vi x) { return reinterpret_cast<vf>(x); }  // bit casts (same size)
inline vi as_i(vf x) { return reinterpret_cast<vi>(x); }
inline vf vabs(vf x) { return as_f(as_i(x) & 0x7fffffff); }
inline vi lane_index() {
  vi r;
  for (int l = 0; l < kLanes; ++l) r[l] = l;
  return r;
}

// e^x per lane (see the header comment): measured max relative error 1.4·2^-24 (under 1 ulp)
// on [ln FLT_MIN, ln FLT_MAX].
inline vf exp_v(vf x) {
  constexpr float kLo = -87.3365447505531f;  // ~ln(FLT_MIN): at or below, the result is 0
  constexpr float kHi = 88.8f;               // above ln(FLT_MAX) = 88.7228: overflows to inf
  constexpr float kMagic = 12582912.f;       // 1.5·2^23: adding it rounds to an integer
  const vi under = x <= kLo;                 // false for NaN; exp(kLo) itself would be subnormal
  vf xc = under ? splat(kLo) : x;
  xc = xc > kHi ? splat(kHi) : xc;  // NaN passes both selects
  const vf t = xc * 1.44269504088896341f + kMagic;
  const vf fn = t - kMagic;  // round(x·log2 e), |fn| <= 129
  // The integer n and the exponent fields in unsigned lanes (wrap-around, never signed
  // overflow, also for the garbage n of a NaN lane, whose result is NaN anyway).
  typedef uint32_t vu __attribute__((vector_size(4 * kLanes)));
  const vu n = reinterpret_cast<vu>(t) - reinterpret_cast<vu>(splat(kMagic));
  vf r = xc - fn * 0.693359375f;  // exact (C1 has 9 significant bits)
  r = r - fn * -2.12194440e-4f;
  vf p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // 2^n = 2^h · 2^(n−h) with h = floor(n/2) (arithmetic shift), each factor a normal number for
  // n in [−126, 129].
  const vu h = reinterpret_cast<vu>(reinterpret_cast<vi>(n) >> 1);
  const vf y = p * reinterpret_cast<vf>((h + 127u) << 23) * reinterpret_cast<vf>((n - h + 127u) << 23);
  return as_f(as_i(y) & ~under);
}

// σ(x) per lane: saturates to exactly 0 / 1, NaN propagates.
inline vf sigmoid_v(vf x) {
  const vf e = exp_v(-vabs(x));
  const vf d = 1.0f / (e + 1.0f);
  return x >= 0.0f ? d : e * d;
}

// Applies f (vf -> vf) to x [n] into y [n] (may alias).
template <class F>
inline void map1(const float* x, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) storev(y + i, f(loadv(x + i)));
  if (i < n) store_part(y + i, f(load_part(x + i, n - i)), n - i);
}

// Σ f(a_i, b_i) with kUnroll·kLanes partial sums (b may be unused).
template <class F>
inline float reduce2(const float* a, const float* b, int64_t n, F f) {
  vf acc[kUnroll] = {};
  int64_t i = 0;
  for (; i + kUnroll * kLanes <= n; i += kUnroll * kLanes)
    for (int u = 0; u < kUnroll; ++u) acc[u] += f(loadv(a + i + u * kLanes), loadv(b + i + u * kLanes));
  for (; i + kLanes <= n; i += kLanes) acc[0] += f(loadv(a + i), loadv(b + i));
  if (i < n) acc[1] += f(load_part(a + i, n - i), load_part(b + i, n - i));  // pads: f(0,0) = 0
  return hsum((acc[0] + acc[1]) + (acc[2] + acc[3]));
}
static_assert(kUnroll == 4, "reduce2 and softmax combine four accumulators");

float dot(const float* a, const float* b, int64_t n) {
  return reduce2(a, b, n, [](vf x, vf y) { return x * y; });
}

float sum_sq(const float* x, int64_t n) {
  return reduce2(x, x, n, [](vf a, vf) { return a * a; });
}

void axpy(float a, const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) storev(y + i, loadv(y + i) + a * loadv(x + i));
  if (i < n) store_part(y + i, load_part(y + i, n - i) + a * load_part(x + i, n - i), n - i);
}

void scale(const float* x, float a, float* y, int64_t n) {
  map1(x, y, n, [a](vf v) { return v * a; });
}

void sigmoid(const float* x, float* y, int64_t n) { map1(x, y, n, sigmoid_v); }

// SiLU(x) = x·σ(x), with SiLU(−inf) = 0 (the limit; x·σ(x) would be −inf·0 = NaN).
inline vf silu_v(vf x) {
  const vf s = sigmoid_v(x);
  return s == 0.0f ? vf{} : x * s;
}

void silu(const float* x, float* y, int64_t n) { map1(x, y, n, silu_v); }

void mul_sigmoid(const float* g, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) storev(y + i, loadv(y + i) * sigmoid_v(loadv(g + i)));
  if (i < n) store_part(y + i, load_part(y + i, n - i) * sigmoid_v(load_part(g + i, n - i)), n - i);
}

void exp(const float* x, float* y, int64_t n) { map1(x, y, n, exp_v); }

void softmax(float* x, int64_t n) {
  // Max: per-lane running max, then across lanes and over the scalar tail.
  vf m = splat(x[0]);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const vf v = loadv(x + i);
    m = v > m ? v : m;  // a NaN is skipped here but propagates through the sum below
  }
  float mx = m[0];
  for (int l = 1; l < kLanes; ++l) mx = m[l] > mx ? m[l] : mx;
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  // e_i = exp(x_i − max) in place, kUnroll·kLanes fp32 partial sums like reduce2 (the padded
  // lanes of the tail are masked out of the sum).
  vf acc[kUnroll] = {};
  i = 0;
  for (; i + kUnroll * kLanes <= n; i += kUnroll * kLanes)
    for (int u = 0; u < kUnroll; ++u) {
      const vf e = exp_v(loadv(x + i + u * kLanes) - mx);
      storev(x + i + u * kLanes, e);
      acc[u] += e;
    }
  for (; i + kLanes <= n; i += kLanes) {
    const vf e = exp_v(loadv(x + i) - mx);
    storev(x + i, e);
    acc[0] += e;
  }
  if (i < n) {
    const vf e = exp_v(load_part(x + i, n - i) - mx);
    store_part(x + i, e, n - i);
    acc[1] += lane_index() < static_cast<int32_t>(n - i) ? e : vf{};
  }
  const float inv = 1.0f / hsum((acc[0] + acc[1]) + (acc[2] + acc[3]));
  map1(x, x, n, [inv](vf v) { return v * inv; });
}

// One online-softmax step (vec.h softmax_online): the max and the exponentials as in softmax
// above (same partial sums), the visible prefix only; the rest of the row is zeroed.
float softmax_online(float* x, int64_t n_vis, int64_t n, float* m_run, float* l_run) {
  vf m = splat(x[0]);
  int64_t i = 0;
  for (; i + kLanes <= n_vis; i += kLanes) {
    const vf v = loadv(x + i);
    m = v > m ? v : m;
  }
  float mx = m[0];
  for (int l = 1; l < kLanes; ++l) mx = m[l] > mx ? m[l] : mx;
  for (; i < n_vis; ++i) mx = x[i] > mx ? x[i] : mx;
  const float m_old = *m_run;
  const float m_new = m_old > mx ? m_old : mx;
  vf acc[kUnroll] = {};
  i = 0;
  for (; i + kUnroll * kLanes <= n_vis; i += kUnroll * kLanes)
    for (int u = 0; u < kUnroll; ++u) {
      const vf e = exp_v(loadv(x + i + u * kLanes) - m_new);
      storev(x + i + u * kLanes, e);
      acc[u] += e;
    }
  for (; i + kLanes <= n_vis; i += kLanes) {
    const vf e = exp_v(loadv(x + i) - m_new);
    storev(x + i, e);
    acc[0] += e;
  }
  if (i < n_vis) {
    const vf e = exp_v(load_part(x + i, n_vis - i) - m_new);
    store_part(x + i, e, n_vis - i);
    acc[1] += lane_index() < static_cast<int32_t>(n_vis - i) ? e : vf{};
  }
  for (i = n_vis; i < n; ++i) x[i] = 0.0f;
  const float alpha = exp_v(splat(m_old - m_new))[0];  // e^{-inf} = 0 for the first step
  *l_run = *l_run * alpha + hsum((acc[0] + acc[1]) + (acc[2] + acc[3]));
  *m_run = m_new;
  return alpha;
}

// RMSNorm: the sum of squares and the scaling in fp64 lanes (each fp32 vector converted as two
// half-width fp64 vectors, which map to native registers), so each output is one rounding of the
// fp64 result, like k3::ref::rmsnorm: these norms feed every sublayer, and on random test models
// their fp32 rounding alone moved the logits by 1e-5 (vs 3e-6 this way).
typedef double vd __attribute__((vector_size(4 * kLanes)));  // kLanes / 2 doubles
inline vd lo_d(vf v) {
#if defined(__AVX__)
  return __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3), vd);
#else
  return __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1), vd);
#endif
}
inline vd hi_d(vf v) {
#if defined(__AVX__)
  return __builtin_convertvector(__builtin_shufflevector(v, v, 4, 5, 6, 7), vd);
#else
  return __builtin_convertvector(__builtin_shufflevector(v, v, 2, 3), vd);
#endif
}
inline vf join_f(vd lo, vd hi) {
  typedef float vh __attribute__((vector_size(2 * kLanes)));
  const vh l = __builtin_convertvector(lo, vh), h = __builtin_convertvector(hi, vh);
#if defined(__AVX__)
  return __builtin_shufflevector(l, h, 0, 1, 2, 3, 4, 5, 6, 7);
#else
  return __builtin_shufflevector(l, h, 0, 1, 2, 3);
#endif
}
inline void rmsnorm_block(vf v, vf wv, double inv, bool has_w, vf* out) {
  vd a = lo_d(v) * inv, b = hi_d(v) * inv;
  if (has_w) {
    a *= lo_d(wv);
    b *= hi_d(wv);
  }
  *out = join_f(a, b);
}
void rmsnorm(const float* x, const float* w, float eps, float* y, int64_t n) {
  if (n <= 0) return;
  vd acc0{}, acc1{}, acc2{}, acc3{};
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    const vf v = loadv(x + i), u = loadv(x + i + kLanes);
    const vd a = lo_d(v), b = hi_d(v), c = lo_d(u), d = hi_d(u);
    acc0 += a * a;
    acc1 += b * b;
    acc2 += c * c;
    acc3 += d * d;
  }
  for (; i < n; i += kLanes) {  // at most two more (partial) vectors, zero-padded
    const vf v = i + kLanes <= n ? loadv(x + i) : load_part(x + i, n - i);
    const vd a = lo_d(v), b = hi_d(v);
    acc0 += a * a;
    acc1 += b * b;
  }
  const vd acc = (acc0 + acc1) + (acc2 + acc3);
  double ss = 0.0;
  for (int l = 0; l < kLanes / 2; ++l) ss += acc[l];
  const double inv = 1.0 / sqrt(ss / static_cast<double>(n) + static_cast<double>(eps));
  vf r;
  for (i = 0; i + kLanes <= n; i += kLanes) {
    rmsnorm_block(loadv(x + i), w ? loadv(w + i) : vf{}, inv, w != nullptr, &r);
    storev(y + i, r);
  }
  if (i < n) {
    rmsnorm_block(load_part(x + i, n - i), w ? load_part(w + i, n - i) : vf{}, inv, w != nullptr, &r);
    store_part(y + i, r, n - i);
  }
}
void l2norm(const float* x, float eps, float s, float* y, int64_t n) {
  if (n <= 0) return;
  const float f = s / sqrtf(sum_sq(x, n) + eps);
  map1(x, y, n, [f](vf v) { return v * f; });
}

// short_conv_silu. Every row of ext, taps and out is C floats apart; with C a multiple of 1024
// (K3's widths) all of them alias in the L1 sets, and K taps rows + K ext rows + the out row
// exceed the 8 ways. So the main path walks one 64-byte column strip at a time with the K <= 4
// taps of the strip in registers, down all T tokens: K ext lines + 1 out line are live per set,
// and each ext line is reused by the next K−1 tokens. Other K and the last C mod 16 columns take
// the generic loop. Both sum in the order j = 0, 1, ..., K−1 starting from the j = 0 product.
inline constexpr int64_t kStrip = 16;                              // floats per 64-byte strip
inline constexpr int kStripV = static_cast<int>(kStrip) / kLanes;  // vectors per strip

template <int K>
inline void conv_strip(const float* ext, const float* taps, int64_t T, int64_t C, int64_t c, float* out) {
  vf tp[K][kStripV];
  for (int j = 0; j < K; ++j)
    for (int v = 0; v < kStripV; ++v) tp[j][v] = loadv(taps + j * C + c + v * kLanes);
  for (int64_t t = 0; t < T; ++t) {
    const float* e = ext + t * C + c;
    for (int v = 0; v < kStripV; ++v) {
      vf acc = tp[0][v] * loadv(e + v * kLanes);
      for (int j = 1; j < K; ++j) acc += tp[j][v] * loadv(e + j * C + v * kLanes);
      storev(out + t * C + c + v * kLanes, silu_v(acc));
    }
  }
}

// Generic path: out[t, c .. c+m) for m <= kLanes columns, any K.
inline vf conv_col(const float* ext, const float* taps, int64_t t, int64_t C, int64_t K, int64_t c, int64_t m) {
  if (m == kLanes) {
    vf acc = loadv(taps + c) * loadv(ext + t * C + c);
    for (int64_t j = 1; j < K; ++j) acc += loadv(taps + j * C + c) * loadv(ext + (t + j) * C + c);
    return silu_v(acc);
  }
  vf acc = load_part(taps + c, m) * load_part(ext + t * C + c, m);
  for (int64_t j = 1; j < K; ++j) acc += load_part(taps + j * C + c, m) * load_part(ext + (t + j) * C + c, m);
  return silu_v(acc);
}

void short_conv_silu(const float* ext, const float* taps, int64_t T, int64_t C, int64_t K, float* out) {
  int64_t c0 = 0;
  if (K >= 1 && K <= 4) {
    for (; c0 + kStrip <= C; c0 += kStrip) {
      switch (K) {
        case 1: conv_strip<1>(ext, taps, T, C, c0, out); break;
        case 2: conv_strip<2>(ext, taps, T, C, c0, out); break;
        case 3: conv_strip<3>(ext, taps, T, C, c0, out); break;
        default: conv_strip<4>(ext, taps, T, C, c0, out); break;
      }
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    int64_t c = c0;
    for (; c + kLanes <= C; c += kLanes) storev(out + t * C + c, conv_col(ext, taps, t, C, K, c, kLanes));
    if (c < C) store_part(out + t * C + c, conv_col(ext, taps, t, C, K, c, C - c), C - c);
  }
}

// gemm_nn micro tile: rows [i0, i0+MR) x columns [j0, j0 + 2·kLanes) (nj <= 2·kLanes valid).
template <int MR, bool kFull>
inline void gemm_nn_tile(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t nj,
                         int64_t k, bool accumulate) {
  vf acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = vf{};
  const int64_t n0 = nj < kLanes ? nj : kLanes, n1 = nj - n0;
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* br = b + kk * ldb;
    const vf b0 = kFull ? loadv(br) : load_part(br, n0);
    const vf b1 = kFull ? loadv(br + kLanes) : (n1 > 0 ? load_part(br + kLanes, n1) : vf{});
    for (int r = 0; r < MR; ++r) {
      const vf av = splat(a[r * lda + kk]);
      acc[r][0] = fmadd(av, b0, acc[r][0]);
      acc[r][1] = fmadd(av, b1, acc[r][1]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    float* cr = c + r * ldc;
    if (kFull) {
      storev(cr, accumulate ? loadv(cr) + acc[r][0] : acc[r][0]);
      storev(cr + kLanes, accumulate ? loadv(cr + kLanes) + acc[r][1] : acc[r][1]);
    } else {
      store_part(cr, accumulate ? load_part(cr, n0) + acc[r][0] : acc[r][0], n0);
      if (n1 > 0) store_part(cr + kLanes, accumulate ? load_part(cr + kLanes, n1) + acc[r][1] : acc[r][1], n1);
    }
  }
}

void gemm_nn(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t n,
             int64_t k, bool accumulate) {
  constexpr int64_t NB = 2 * kLanes;
  // Column blocks outside: the B panel [k, NB] stays in L1 while every row block passes.
  for (int64_t j0 = 0; j0 < n; j0 += NB) {
    const int64_t nj = n - j0 < NB ? n - j0 : NB;
    const bool full = nj == NB;
    int64_t i0 = 0;
    for (; i0 + 4 <= m; i0 += 4) {
      if (full) gemm_nn_tile<4, true>(a + i0 * lda, lda, b + j0, ldb, c + i0 * ldc + j0, ldc, nj, k, accumulate);
      else gemm_nn_tile<4, false>(a + i0 * lda, lda, b + j0, ldb, c + i0 * ldc + j0, ldc, nj, k, accumulate);
    }
    for (; i0 < m; ++i0) {
      if (full) gemm_nn_tile<1, true>(a + i0 * lda, lda, b + j0, ldb, c + i0 * ldc + j0, ldc, nj, k, accumulate);
      else gemm_nn_tile<1, false>(a + i0 * lda, lda, b + j0, ldb, c + i0 * ldc + j0, ldc, nj, k, accumulate);
    }
  }
}

}  // namespace vecimpl

// Puts this ISA's vec kernels into t (the caller sets every other member).
inline void vec_fill_table(KernelTable& t) {
  t.dot = vecimpl::dot;
  t.sum_sq = vecimpl::sum_sq;
  t.axpy = vecimpl::axpy;
  t.scale = vecimpl::scale;
  t.sigmoid = vecimpl::sigmoid;
  t.silu = vecimpl::silu;
  t.mul_sigmoid = vecimpl::mul_sigmoid;
  t.exp = vecimpl::exp;
  t.softmax = vecimpl::softmax;
  t.softmax_online = vecimpl::softmax_online;
  t.rmsnorm = vecimpl::rmsnorm;
  t.l2norm = vecimpl::l2norm;
  t.short_conv_silu = vecimpl::short_conv_silu;
  t.gemm_nn = vecimpl::gemm_nn;
}

}  // namespace
}  // namespace k3

#pragma GCC diagnostic pop
