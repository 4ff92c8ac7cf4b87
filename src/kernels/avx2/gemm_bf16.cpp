// AVX2 + FMA BF16 GEMV/GEMM: Y[t, r] = Σ_k W[r, k]·X[t, k], W bf16 [rows, K], X fp32 [T, K].
// bf16 -> fp32 by zero-extension and a 16-bit shift (vpmovzxwd + vpslld, or vpunpck with zero).
//
// Two paths:
//  * T below the threshold (T < 4, or T < 16 when K > 1024; decode T == 1): "row-dot" kernel.
//    Register block 4 weight rows x 3 tokens (12 accumulators along K, one horizontal sum per
//    output); T == 1 streams each row once with 4 concurrent row streams per thread
//    (memory-bound, tuned).
//  * T at or above it (prefill): "panel" kernel. A panel of 16 weight rows x a K block (1024)
//    is converted once to fp32 and transposed into a thread-local buffer laid out [k][16]; the
//    micro-kernel loads the 16 weights of one k (2 ymm) and broadcasts X[t, k] for 6 tokens
//    (12 accumulators Y[t, r..r+16] as vectors): no per-output horizontal sums, vector stores.
//    It runs the k of one residue mod 8 at a time so that every output is bitwise the row-dot
//    kernel's (T > 1) result (see panel_micro): switching paths changes no number, and the
//    result of a row does not depend on r0/r1, the panel it lands in or the token tiling.
#include "kernels/avx2/avx2_kernels.h"
#include "kernels/avx2/avx2_util.h"

#include <cmath>

namespace k3::avx2 {

// The two paths of gemm_bf16 on their own, for k3_bench_kernels (not in avx2_kernels.h or the
// KernelTable; same contract as gemm_bf16).
void gemm_bf16_rowdot(const uint16_t* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t t, float* y,
                      int64_t ldy, int64_t r0, int64_t r1);
void gemm_bf16_panel(const uint16_t* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t t, float* y,
                     int64_t ldy, int64_t r0, int64_t r1);

namespace {

// ---------------------------------------------------------------- row-dot path (T small)

template <int R, int N>
void micro(const uint16_t* w, int64_t ldw, const float* x, int64_t ldx, int64_t kn, float* y, int64_t ldy,
           bool accumulate) {
  __m256 acc[R][N];
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) acc[r][n] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= kn; i += 8) {
    __m256 xv[N];
    for (int n = 0; n < N; ++n) xv[n] = _mm256_loadu_ps(x + n * ldx + i);
    for (int r = 0; r < R; ++r) {
      const __m256 wv = load_bf16x8(w + r * ldw + i);
      for (int n = 0; n < N; ++n) acc[r][n] = _mm256_fmadd_ps(wv, xv[n], acc[r][n]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) {
      float s = hsum(acc[r][n]);
      // explicit FMA (what -ffp-contract=fast made of `s += w·x`): the panel path mirrors it
      for (int64_t j = i; j < kn; ++j) s = __builtin_fmaf(bf16_scalar(w + r * ldw + j), x[n * ldx + j], s);
      float* d = y + n * ldy + r;
      *d = accumulate ? *d + s : s;
    }
}

using MicroFn = void (*)(const uint16_t*, int64_t, const float*, int64_t, int64_t, float*, int64_t, bool);
constexpr int kR = 4, kN = 3;
constexpr MicroFn kMicro[kR][kN] = {
    {micro<1, 1>, micro<1, 2>, micro<1, 3>},
    {micro<2, 1>, micro<2, 2>, micro<2, 3>},
    {micro<3, 1>, micro<3, 2>, micro<3, 3>},
    {micro<4, 1>, micro<4, 2>, micro<4, 3>},
};

// ---------------------------------------------------------------- panel path (T large)

// Panel path from T >= 4 when K <= 1024 (K3-mini), T >= 16 for wider K (K3: the packing is paid
// once per K block and then shared by fewer tokens); measured with k3_bench_kernels --gemm-only.
constexpr int kPanelMinTokens = 4;
constexpr int kPanelMinTokensWideK = 16;
constexpr int64_t kWideK = 1024;
constexpr int kP = 16;  // weight rows per panel (2 ymm)
constexpr int kTB = 6;  // tokens per micro-kernel call (12 accumulators)
// K block = the row-dot kernel's (1024, which the bitwise-equal results need): the packed panel
// is <= 1024 x 16 fp32 = 64 KiB (L1 for K <= 384, else L2: 2 loads per 12 FMAs is within L2's
// bandwidth); token tile 64: the X tile (64 x 1024 fp32 = 256 KiB) stays in L2.
constexpr int64_t kKc = 1024;
constexpr int64_t kTc = 64;

// Packed panel, [k][16] with the rows of one k in the order 0-3, 8-11, 4-7, 12-15 (what the
// 16-bit transpose plus zero-interleave produces without a cross-lane step); the micro-kernel
// restores the natural order with two vperm2f128 per token when it loads / stores Y.
alignas(32) thread_local float g_panel[kKc * kP];
alignas(32) const uint16_t kZeroRow[kKc] = {};  // stands in for the rows past r1 in a panel

inline int panel_slot(int i) { return (i & 3) | (((i >> 2) & 1) << 3) | (((i >> 3) & 1) << 2); }

// Packs rows p[0..16) (each a pointer to kn bf16 values) into buf as fp32 [kn][16], and
// prefetches the next panel's rows pn[0..16) (kn_next values each): the K blocks of one row are
// not read one after the other, so the hardware stream prefetchers do not see them coming.
void pack_panel(const uint16_t* const* p, int64_t kn, float* buf, const uint16_t* const* pn, int64_t kn_next) {
  const __m256i zero = _mm256_setzero_si256();
  int64_t k = 0;
  for (; k + 8 <= kn; k += 8) {
    if ((k & 31) == 0 && k < kn_next)
      for (int i = 0; i < kP; ++i) _mm_prefetch(reinterpret_cast<const char*>(pn[i] + k), _MM_HINT_T0);
    // r[i] = [row i | row i+8], 8 bf16 each (columns k..k+7)
    __m256i r[8];
    for (int i = 0; i < 8; ++i)
      r[i] =
          _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p[i] + k))),
                                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[i + 8] + k)), 1);
    const __m256i t0 = _mm256_unpacklo_epi16(r[0], r[1]), t1 = _mm256_unpackhi_epi16(r[0], r[1]);
    const __m256i t2 = _mm256_unpacklo_epi16(r[2], r[3]), t3 = _mm256_unpackhi_epi16(r[2], r[3]);
    const __m256i t4 = _mm256_unpacklo_epi16(r[4], r[5]), t5 = _mm256_unpackhi_epi16(r[4], r[5]);
    const __m256i t6 = _mm256_unpacklo_epi16(r[6], r[7]), t7 = _mm256_unpackhi_epi16(r[6], r[7]);
    // u[c/2] (rows 0-3 | 8-11) holds columns c, c+1; v[c/2] the same for rows 4-7 | 12-15
    const __m256i u[4] = {_mm256_unpacklo_epi32(t0, t2), _mm256_unpackhi_epi32(t0, t2), _mm256_unpacklo_epi32(t1, t3),
                          _mm256_unpackhi_epi32(t1, t3)};
    const __m256i v[4] = {_mm256_unpacklo_epi32(t4, t6), _mm256_unpackhi_epi32(t4, t6), _mm256_unpacklo_epi32(t5, t7),
                          _mm256_unpackhi_epi32(t5, t7)};
    float* d = buf + k * kP;
    for (int c = 0; c < 4; ++c) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(d + (2 * c) * kP), _mm256_unpacklo_epi16(zero, u[c]));
      _mm256_store_si256(reinterpret_cast<__m256i*>(d + (2 * c) * kP + 8), _mm256_unpacklo_epi16(zero, v[c]));
      _mm256_store_si256(reinterpret_cast<__m256i*>(d + (2 * c + 1) * kP), _mm256_unpackhi_epi16(zero, u[c]));
      _mm256_store_si256(reinterpret_cast<__m256i*>(d + (2 * c + 1) * kP + 8), _mm256_unpackhi_epi16(zero, v[c]));
    }
  }
  for (; k < kn; ++k)
    for (int i = 0; i < kP; ++i) buf[k * kP + panel_slot(i)] = bf16_scalar(p[i] + k);
  if (kn_next > 0)  // the last line of each next row (its start may not be 64-byte aligned)
    for (int i = 0; i < kP; ++i) _mm_prefetch(reinterpret_cast<const char*>(pn[i] + kn_next - 1), _MM_HINT_T0);
}

// Y[n, 0..rn) (+)= Σ_{k<kn} panel[k][·]·x[n, k] for n < N. l<n> holds rows 0-3 | 8-11, h<n>
// rows 4-7 | 12-15 (the panel order); vperm2f128 maps them to / from rows 0-7 and 8-15.
// Y[t, r..r+16) <-> (rows 0-3 | 8-11, rows 4-7 | 12-15); rn < 16: only rows < rn are touched.
inline void load_y(const float* d, int rn, __m256& lo, __m256& hi) {
  __m256 a, b;
  if (rn == kP) {
    a = _mm256_loadu_ps(d);
    b = _mm256_loadu_ps(d + 8);
  } else {
    alignas(32) float t[kP] = {};
    for (int i = 0; i < rn; ++i) t[i] = d[i];
    a = _mm256_load_ps(t);
    b = _mm256_load_ps(t + 8);
  }
  lo = _mm256_permute2f128_ps(a, b, 0x20);
  hi = _mm256_permute2f128_ps(a, b, 0x31);
}
inline void store_y(float* d, int rn, __m256 lo, __m256 hi) {
  const __m256 a = _mm256_permute2f128_ps(lo, hi, 0x20), b = _mm256_permute2f128_ps(lo, hi, 0x31);
  if (rn == kP) {
    _mm256_storeu_ps(d, a);
    _mm256_storeu_ps(d + 8, b);
  } else {
    alignas(32) float t[kP];
    _mm256_store_ps(t, a);
    _mm256_store_ps(t + 8, b);
    for (int i = 0; i < rn; ++i) d[i] = t[i];
  }
}

// The panel micro-kernel reproduces the row-dot kernel's arithmetic exactly: lane j of a
// row-dot accumulator is the FMA chain over k = j, j+8, j+16, ... < kn8 (kn8 = kn rounded down
// to 8); its horizontal sum is ((c0+c4)+(c2+c6)) + ((c1+c5)+(c3+c7)); the tail k >= kn8 is
// FMA'd into that sum in order; a later K block adds its sum to Y. Here chain j runs for all
// 6 tokens x 16 rows at once (12 accumulators), is parked in `ch`, and the sums are formed
// after the 8 chains.
template <int N>
void panel_micro(const float* buf, int64_t kn, const float* x, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                 int rn) {
  static_assert(N >= 1 && N <= 6, "6 tokens x 16 rows = 12 accumulators");
  alignas(32) float ch[8][2 * N][8];  // [chain j][accumulator][lane]
  // (named accumulators, not an array: GCC keeps an array of __m256 in memory across the loop)
  const float* x0 = x;
  const float* x1 = x + (N > 1 ? ldx : 0);
  const float* x2 = x + (N > 2 ? 2 * ldx : 0);
  const float* x3 = x + (N > 3 ? 3 * ldx : 0);
  const float* x4 = x + (N > 4 ? 4 * ldx : 0);
  const float* x5 = x + (N > 5 ? 5 * ldx : 0);
  const int64_t kn8 = kn & ~int64_t{7};
  for (int j = 0; j < 8; ++j) {
    __m256 l0, l1, l2, l3, l4, l5, h0, h1, h2, h3, h4, h5;
    l0 = l1 = l2 = l3 = l4 = l5 = h0 = h1 = h2 = h3 = h4 = h5 = _mm256_setzero_ps();
    for (int64_t k = j; k < kn8; k += 8) {
      const __m256 w0 = _mm256_load_ps(buf + k * kP), w1 = _mm256_load_ps(buf + k * kP + 8);
      __m256 xb = _mm256_broadcast_ss(x0 + k);
      l0 = _mm256_fmadd_ps(w0, xb, l0);
      h0 = _mm256_fmadd_ps(w1, xb, h0);
      if constexpr (N > 1) {
        xb = _mm256_broadcast_ss(x1 + k);
        l1 = _mm256_fmadd_ps(w0, xb, l1);
        h1 = _mm256_fmadd_ps(w1, xb, h1);
      }
      if constexpr (N > 2) {
        xb = _mm256_broadcast_ss(x2 + k);
        l2 = _mm256_fmadd_ps(w0, xb, l2);
        h2 = _mm256_fmadd_ps(w1, xb, h2);
      }
      if constexpr (N > 3) {
        xb = _mm256_broadcast_ss(x3 + k);
        l3 = _mm256_fmadd_ps(w0, xb, l3);
        h3 = _mm256_fmadd_ps(w1, xb, h3);
      }
      if constexpr (N > 4) {
        xb = _mm256_broadcast_ss(x4 + k);
        l4 = _mm256_fmadd_ps(w0, xb, l4);
        h4 = _mm256_fmadd_ps(w1, xb, h4);
      }
      if constexpr (N > 5) {
        xb = _mm256_broadcast_ss(x5 + k);
        l5 = _mm256_fmadd_ps(w0, xb, l5);
        h5 = _mm256_fmadd_ps(w1, xb, h5);
      }
    }
    _mm256_store_ps(ch[j][0], l0);
    _mm256_store_ps(ch[j][1], h0);
    if constexpr (N > 1) _mm256_store_ps(ch[j][2], l1), _mm256_store_ps(ch[j][3], h1);
    if constexpr (N > 2) _mm256_store_ps(ch[j][4], l2), _mm256_store_ps(ch[j][5], h2);
    if constexpr (N > 3) _mm256_store_ps(ch[j][6], l3), _mm256_store_ps(ch[j][7], h3);
    if constexpr (N > 4) _mm256_store_ps(ch[j][8], l4), _mm256_store_ps(ch[j][9], h4);
    if constexpr (N > 5) _mm256_store_ps(ch[j][10], l5), _mm256_store_ps(ch[j][11], h5);
  }
  for (int n = 0; n < N; ++n) {
    const float* xn = x + n * ldx;
    __m256 s[2];
    for (int h = 0; h < 2; ++h) {
      const int a = 2 * n + h;
      auto c = [&](int j) { return _mm256_load_ps(ch[j][a]); };
      __m256 v = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c(0), c(4)), _mm256_add_ps(c(2), c(6))),
                               _mm256_add_ps(_mm256_add_ps(c(1), c(5)), _mm256_add_ps(c(3), c(7))));
      for (int64_t k = kn8; k < kn; ++k)
        v = _mm256_fmadd_ps(_mm256_load_ps(buf + k * kP + 8 * h), _mm256_broadcast_ss(xn + k), v);
      s[h] = v;
    }
    if (accumulate) {
      __m256 lo, hi;
      load_y(y + n * ldy, rn, lo, hi);
      s[0] = _mm256_add_ps(lo, s[0]);
      s[1] = _mm256_add_ps(hi, s[1]);
    }
    store_y(y + n * ldy, rn, s[0], s[1]);
  }
}

using PanelFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, bool, int);
constexpr PanelFn kPanelMicro[kTB] = {panel_micro<1>, panel_micro<2>, panel_micro<3>,
                                      panel_micro<4>, panel_micro<5>, panel_micro<6>};

}  // namespace

// The row-dot kernel for every T (the only kernel before the panel path; kept for T < 4 and as
// the benchmark's "previous version"). Not part of the KernelTable.
void gemm_bf16_rowdot(const uint16_t* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t t, float* y,
                      int64_t ldy, int64_t r0, int64_t r1) {
  // Every output is summed in K blocks of 1024 (one horizontal sum per block, blocks added in
  // order), whatever T: a token's outputs are then the same bits alone (decode, T == 1) as in a
  // batch of any size (continuous batching; tests/kernels/test_batch_invariance.cpp). T == 1
  // walks each group of rows through all its K blocks before the next group: rows stream in order.
  if (t == 1) {
    for (int64_t r = r0; r < r1; r += kR) {
      const int64_t rn = r1 - r < kR ? r1 - r : kR;
      for (int64_t k0 = 0; k0 < k || k0 == 0; k0 += 1024) {
        const int64_t kn = k - k0 < 1024 ? k - k0 : 1024;
        kMicro[rn - 1][0](w + r * ldw + k0, ldw, x + k0, ldx, kn, y + r, ldy, k0 > 0);
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
      for (int64_t r = r0; r < r1; r += kR) {
        const int64_t rn = r1 - r < kR ? r1 - r : kR;
        for (int64_t j = 0; j < tn; j += kN) {
          const int64_t nn = tn - j < kN ? tn - j : kN;
          kMicro[rn - 1][nn - 1](w + r * ldw + k0, ldw, x + (t0 + j) * ldx + k0, ldx, kn, y + (t0 + j) * ldy + r, ldy,
                                 k0 > 0);
        }
      }
      if (k == 0) break;
    }
  }
}

// The packed-panel kernel for every T >= 1 (gemm_bf16 uses it from kPanelMinTokens / kPanelMinTokensWideK on).
// Not part of the KernelTable; exposed for the benchmark.
void gemm_bf16_panel(const uint16_t* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t t, float* y,
                     int64_t ldy, int64_t r0, int64_t r1) {
  if (k == 0) {
    for (int64_t j = 0; j < t; ++j)
      for (int64_t r = r0; r < r1; ++r) y[j * ldy + r] = 0.f;
    return;
  }
  float* buf = g_panel;
  const uint16_t* p[kP];
  const uint16_t* pn[kP];
  for (int64_t t0 = 0; t0 < t; t0 += kTc) {
    const int64_t tn = t - t0 < kTc ? t - t0 : kTc;
    // token blocks of <= 6, balanced (8 -> 4 + 4, not 6 + 2: fewer accumulators idle FMA latency)
    const int64_t nblk = (tn + kTB - 1) / kTB, base = tn / nblk, extra = tn % nblk;
    for (int64_t k0 = 0; k0 < k; k0 += kKc) {
      const int64_t kn = k - k0 < kKc ? k - k0 : kKc;
      for (int64_t r = r0; r < r1; r += kP) {
        const int rn = static_cast<int>(r1 - r < kP ? r1 - r : kP);
        for (int i = 0; i < kP; ++i) p[i] = i < rn ? w + (r + i) * ldw + k0 : kZeroRow;
        // the next panel: the next rows of this K block, or the first rows of the next K block
        int64_t rnext = r + kP, knext0 = k0;
        if (rnext >= r1) {
          rnext = r0;
          knext0 = k0 + kKc;
        }
        const int64_t kn_next = knext0 < k ? (k - knext0 < kKc ? k - knext0 : kKc) : 0;
        for (int i = 0; i < kP; ++i) pn[i] = rnext + i < r1 && kn_next > 0 ? w + (rnext + i) * ldw + knext0 : kZeroRow;
        pack_panel(p, kn, buf, pn, kn_next);
        const float* xp = x + t0 * ldx + k0;
        float* yp = y + t0 * ldy + r;
        int64_t j = 0;
        for (int64_t bi = 0; bi < nblk; ++bi) {
          const int64_t nn = base + (bi < extra ? 1 : 0);
          kPanelMicro[nn - 1](buf, kn, xp + j * ldx, ldx, yp + j * ldy, ldy, k0 > 0, rn);
          j += nn;
        }
      }
    }
  }
}

// ---------------------------------------------------------------- pair-chain GEMMs (bf16 / mxfp8)
// The 'bf16' and 'mxfp8' numerics modes on AVX2 (no bf16 dot instruction): the same packed
// panels as above, and per output the pair chain of kernel_table.h gemm_bf16_dp in fp32 FMA
// (w[2p+1]·x[2p+1] then w[2p]·x[2p]; the products are exact, so an FMA rounds like vdpbf16ps's
// add). Each K block continues from the stored Y: one chain per output over all of K.

namespace {

alignas(32) thread_local uint16_t g_dec[kP * kKc];  // MXFP4 rows decoded to bf16 (one panel)

template <int N>
void dp_micro(const float* buf, int64_t kn, const uint16_t* xb, int64_t ldxb, float* y, int64_t ldy, bool from_y,
              int rn) {
  __m256 l[N], h[N];
  for (int n = 0; n < N; ++n) {
    if (from_y) {
      load_y(y + n * ldy, rn, l[n], h[n]);
    } else {
      l[n] = _mm256_setzero_ps();
      h[n] = _mm256_setzero_ps();
    }
  }
  int64_t k = 0;
  for (; k + 1 < kn; k += 2) {
    const __m256 wo0 = _mm256_load_ps(buf + (k + 1) * kP), wo1 = _mm256_load_ps(buf + (k + 1) * kP + 8);
    const __m256 we0 = _mm256_load_ps(buf + k * kP), we1 = _mm256_load_ps(buf + k * kP + 8);
    for (int n = 0; n < N; ++n) {
      const __m256 xo = _mm256_set1_ps(bf16_scalar(xb + n * ldxb + k + 1));
      const __m256 xe = _mm256_set1_ps(bf16_scalar(xb + n * ldxb + k));
      l[n] = _mm256_fmadd_ps(wo0, xo, l[n]);
      h[n] = _mm256_fmadd_ps(wo1, xo, h[n]);
      l[n] = _mm256_fmadd_ps(we0, xe, l[n]);
      h[n] = _mm256_fmadd_ps(we1, xe, h[n]);
    }
  }
  if (k < kn) {  // odd K: the missing odd element adds 0·0, then the even one
    const __m256 we0 = _mm256_load_ps(buf + k * kP), we1 = _mm256_load_ps(buf + k * kP + 8);
    for (int n = 0; n < N; ++n) {
      const __m256 xe = _mm256_set1_ps(bf16_scalar(xb + n * ldxb + k));
      l[n] = _mm256_fmadd_ps(we0, xe, _mm256_add_ps(l[n], _mm256_setzero_ps()));
      h[n] = _mm256_fmadd_ps(we1, xe, _mm256_add_ps(h[n], _mm256_setzero_ps()));
    }
  }
  for (int n = 0; n < N; ++n) store_y(y + n * ldy, rn, l[n], h[n]);
}

using DpFn = void (*)(const float*, int64_t, const uint16_t*, int64_t, float*, int64_t, bool, int);
constexpr DpFn kDpMicro[kTB] = {dp_micro<1>, dp_micro<2>, dp_micro<3>, dp_micro<4>, dp_micro<5>, dp_micro<6>};

// Rows of one panel as bf16 pointers: bf16 weights directly, MXFP4 rows decoded into g_dec.
template <class RowsFn>
void gemm_dp(const RowsFn& rows_of, int64_t k, const uint16_t* xb, int64_t ldxb, int64_t t, float* y, int64_t ldy,
             int64_t r0, int64_t r1) {
  if (k == 0) {
    for (int64_t j = 0; j < t; ++j)
      for (int64_t r = r0; r < r1; ++r) y[j * ldy + r] = 0.f;
    return;
  }
  float* buf = g_panel;
  const uint16_t* p[kP];
  for (int64_t t0 = 0; t0 < t; t0 += kTc) {
    const int64_t tn = t - t0 < kTc ? t - t0 : kTc;
    const int64_t nblk = (tn + kTB - 1) / kTB, base = tn / nblk, extra = tn % nblk;
    for (int64_t k0 = 0; k0 < k; k0 += kKc) {
      const int64_t kn = k - k0 < kKc ? k - k0 : kKc;
      for (int64_t r = r0; r < r1; r += kP) {
        const int rn = static_cast<int>(r1 - r < kP ? r1 - r : kP);
        rows_of(r, rn, k0, kn, p);
        pack_panel(p, kn, buf, p, 0);
        int64_t j = 0;
        for (int64_t bi = 0; bi < nblk; ++bi) {
          const int64_t nn = base + (bi < extra ? 1 : 0);
          kDpMicro[nn - 1](buf, kn, xb + (t0 + j) * ldxb + k0, ldxb, y + (t0 + j) * ldy + r, ldy, k0 > 0, rn);
          j += nn;
        }
      }
    }
  }
}

}  // namespace

void gemm_bf16_dp(const uint16_t* w, int64_t ldw, int64_t k, const uint16_t* xb, int64_t ldxb, int64_t t, float* y,
                  int64_t ldy, int64_t r0, int64_t r1) {
  gemm_dp(
      [&](int64_t r, int rn, int64_t k0, int64_t, const uint16_t** p) {
        for (int i = 0; i < kP; ++i) p[i] = i < rn ? w + (r + i) * ldw + k0 : kZeroRow;
      },
      k, xb, ldxb, t, y, ldy, r0, r1);
}

void gemm_mxfp4_dp(const uint8_t* packed, const uint8_t* scale, int64_t k, const uint16_t* xb, int64_t ldxb, int64_t t,
                   float* y, int64_t ldy, int64_t r0, int64_t r1) {
  static constexpr float kE2m1[16] = {0.f,  0.5f,  1.f,  1.5f,  2.f,  3.f,  4.f,  6.f,
                                      -0.f, -0.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};
  gemm_dp(
      [&](int64_t r, int rn, int64_t k0, int64_t kn, const uint16_t** p) {
        for (int i = 0; i < kP; ++i) {
          if (i >= rn) {
            p[i] = kZeroRow;
            continue;
          }
          uint16_t* d = g_dec + i * kKc;
          const uint8_t* pr = packed + (r + i) * (k / 2) + k0 / 2;
          const uint8_t* sr = scale + (r + i) * (k / 32) + k0 / 32;
          for (int64_t b = 0; b < kn / 32; ++b) {
            const uint32_t e = sr[b];
            const uint32_t sb = e == 255 ? 0x7fc00000u : (e >= 1 ? e << 23 : 0x00400000u);
            float sc;
            __builtin_memcpy(&sc, &sb, 4);
            uint16_t tab[16];
            for (int c = 0; c < 16; ++c) {  // exact: E2M1 x 2^(e-127) is a bf16
              const float v = kE2m1[c] * sc;
              uint32_t u;
              __builtin_memcpy(&u, &v, 4);
              tab[c] = static_cast<uint16_t>(u >> 16);
            }
            for (int c = 0; c < 16; ++c) {
              const uint8_t byte = pr[16 * b + c];
              d[32 * b + 2 * c] = tab[byte & 15];
              d[32 * b + 2 * c + 1] = tab[byte >> 4];
            }
          }
          p[i] = d;
        }
      },
      k, xb, ldxb, t, y, ldy, r0, r1);
}

void gemm_bf16(const uint16_t* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t t, float* y, int64_t ldy,
               int64_t r0, int64_t r1) {
  if (t >= (k <= kWideK ? kPanelMinTokens : kPanelMinTokensWideK))
    gemm_bf16_panel(w, ldw, k, x, ldx, t, y, ldy, r0, r1);
  else gemm_bf16_rowdot(w, ldw, k, x, ldx, t, y, ldy, r0, r1);
}

}  // namespace k3::avx2
