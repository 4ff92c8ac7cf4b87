// AVX-512 MXFP4 GEMV/GEMM on the packed bytes (algorithms.md §5.3) with VNNI.
// Two 32-blocks per zmm: 32 packed bytes -> 64 nibbles arranged [lo b0 | hi b0 | lo b1 | hi b1]
// (128-bit lanes; matches the Q8 nibble order of two consecutive blocks), vpshufb through |T2|
// (unsigned operand) and T2 (its sign mask, vpmovb2m), the sign moved onto the activation with a
// masked subtract, vpdpbusd -> int32 lanes 0..7 = block 0, 8..15 = block 1; one fp32 convert and
// FMA per pair of blocks with the scale vector [s0 x8 | s1 x8] (gemm_mxfp4_q8_rowwise, kept for the
// benchmark). Exact route: decode to fp32 + FMA.
//
// gemm_mxfp4_q8 (the kernel-table entry) computes every output exactly as the scalar kernel does,
// y = (...((0 + dot_0·(ws_0·s_0)) + dot_1·(ws_1·s_1)) + ...) in block order, products and sums
// rounded to fp32 (no FMA), with exact int32 block dots: bit-identical to the scalar and AVX2
// kernels for every T, so a token's outputs do not depend on its batch. T <= 2 (decode) streams
// the rows one after the other: 16 blocks' exact int32 dots per row (two blocks per vpdpbusd,
// then a reduction tree), their scaled products in lanes, then 4 rows' running fp32 sums
// interleaved. Larger T (batched decode, prefill) runs the
// "transposed tile" kernel below: 16 weight rows in the 16 int32 lanes, each lane holding 4
// consecutive u = T2 + 12 weights of its row, so that one vpdpbusd with the token's 4 activations
// broadcast adds 4 products to all 16 rows' block dots — no horizontal reduction; the 16 rows'
// blocks are decoded and transposed once per call into an L1 tile buffer and reused by every
// token; the 12·Σq offset of the +12 bias is subtracted per (token, block).
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/avx512_util.h"
#include "kernels/avx2/avx2_kernels.h"
#include "kernels/mxfp4_x86_common.h"

#include <stdlib.h>

namespace k3::avx512 {

using namespace k3::mxfp4_x86;  // E8m0HalfBits table, Scratch, min64, block_offsets

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
void row_q8(const uint8_t* pr, const uint8_t* sr, int64_t nb, int64_t k, const int8_t* q, const float* qs, float* y,
            int64_t ldy) {
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
void row_f32(const uint8_t* pr, const uint8_t* sr, int64_t nb, const float* x, int64_t ldx, float* y, int64_t ldy) {
  const __m256i tab =
      _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
  __m512 acc[N];
  for (int n = 0; n < N; ++n) acc[n] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pr + 16 * b));
    const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
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

// ---- Transposed tile Q8 GEMM (T > 4) ----

constexpr int kTRows = 16;               // weight rows per tile (the 16 int32 / fp32 lanes)
constexpr int64_t kTBlocks = 32;         // blocks per decoded chunk: 32 x 8 groups x 64 B = 16 KiB (L1)
constexpr int64_t kPrefetchBlocks = 32;  // software prefetch distance per row (8 cache lines)
constexpr int kTTok = 12;                // tokens per register group (12 accumulators + 8 weight zmm)
alignas(64) thread_local uint8_t g_tdec[kTBlocks * 8 * 64];
alignas(64) thread_local float g_tws[kTBlocks * kTRows];

// Decodes blocks [b0, b0 + n) of the 16 rows rows[0..16) into g_tdec as [block][group g][row][4]:
// group g < 4 holds the low nibbles of packed bytes 4g..4g+3 (activation positions 4g..4g+3 in
// the Q8 nibble order), group 4 + g their high nibbles (positions 16 + 4g..); u = T2 + 12.
inline void decode_transposed(const uint8_t* packed, const uint8_t* scale, int64_t k, const int64_t* rows, int64_t b0,
                              int64_t n) {
  const __m512i tab = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  // vpermd index: lane 4j + i <- lane 4i + j (transposes the 4x4 dwords of each zmm's 4 rows)
  const __m512i perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const int64_t nb = k / 32, rb = k / 2;
  const uint8_t* pr[kTRows];
  for (int l = 0; l < kTRows; ++l) pr[l] = packed + rows[l] * rb + 16 * b0;
  for (int64_t i = 0; i < n; ++i) {
    // 16 row streams are more than the hardware prefetchers follow: fetch each row's cache line
    // kPrefetchBlocks ahead (a line holds 4 blocks), also across chunk boundaries.
    if ((i & 3) == 0)
      for (int l = 0; l < kTRows; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(pr[l] + 16 * (i + kPrefetchBlocks)), _MM_HINT_T0);
    __m512i z[4];
    for (int q = 0; q < 4; ++q) {
      __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pr[4 * q] + 16 * i)));
      v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(pr[4 * q + 1] + 16 * i)), 1);
      v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(pr[4 * q + 2] + 16 * i)), 2);
      v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(pr[4 * q + 3] + 16 * i)), 3);
      z[q] = _mm512_permutexvar_epi32(perm, v);  // 128-bit lane j = packed dword j of the 4 rows
    }
    const __m512i a = _mm512_shuffle_i32x4(z[0], z[1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i b = _mm512_shuffle_i32x4(z[2], z[3], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i c = _mm512_shuffle_i32x4(z[0], z[1], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512i d = _mm512_shuffle_i32x4(z[2], z[3], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512i p[4] = {_mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)),
                          _mm512_shuffle_i32x4(c, d, _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_i32x4(c, d, _MM_SHUFFLE(3, 1, 3, 1))};  // p[j]: lane l = row l's dword j
    uint8_t* dst = g_tdec + i * 8 * 64;
    for (int j = 0; j < 4; ++j) {
      const __m512i lo = _mm512_and_si512(p[j], m4), hi = _mm512_and_si512(_mm512_srli_epi16(p[j], 4), m4);
      _mm512_store_si512(dst + 64 * j, _mm512_shuffle_epi8(tab, lo));
      _mm512_store_si512(dst + 64 * (4 + j), _mm512_shuffle_epi8(tab, hi));
    }
  }
  for (int l = 0; l < kTRows; ++l) {
    const uint8_t* sr = scale + rows[l] * nb + b0;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t u = kE8m0Half.v[sr[i]];
      __builtin_memcpy(&g_tws[kTRows * i + l], &u, 4);
    }
  }
}

// N tokens (j0..j0+N) of one tile over the decoded chunk [b0, b0 + n): acc (or y) += each block's
// float(dot)·(ws·s_a), in block order, product and sum rounded separately.
template <int N>
void tile_tokens(const int8_t* q, const float* qs, const int32_t* off, int64_t k, int64_t nb, int64_t j0, int64_t b0,
                 int64_t n, float* accbuf, bool first, bool last, float* y, int64_t ldy, int64_t r,
                 __mmask16 store_mask) {
  __m512 acc[N];
  for (int t = 0; t < N; ++t) acc[t] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(accbuf + kTRows * (j0 + t));
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* d = g_tdec + i * 8 * 64;
    __m512i w[8];
    for (int g = 0; g < 8; ++g) w[g] = _mm512_load_si512(d + 64 * g);
    const __m512 ws = _mm512_load_ps(g_tws + kTRows * i);
    for (int t = 0; t < N; ++t) {
      const int64_t j = j0 + t, b = b0 + i;
      const int8_t* qb = q + j * k + 32 * b;
      __m512i dot = _mm512_set1_epi32(-off[j * nb + b]);
      for (int g = 0; g < 8; ++g) {
        int32_t a4;
        __builtin_memcpy(&a4, qb + 4 * g, 4);
        dot = _mm512_dpbusd_epi32(dot, w[g], _mm512_set1_epi32(a4));
      }
      __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(ws, _mm512_set1_ps(qs[j * nb + b])));
      __asm__("" : "+v"(p));  // keep the compiler from contracting the mul + add into an FMA
      acc[t] = _mm512_add_ps(acc[t], p);
    }
  }
  for (int t = 0; t < N; ++t) {
    if (last) _mm512_mask_storeu_ps(y + (j0 + t) * ldy + r, store_mask, acc[t]);
    else _mm512_storeu_ps(accbuf + kTRows * (j0 + t), acc[t]);
  }
}

using TileTokensFn = void (*)(const int8_t*, const float*, const int32_t*, int64_t, int64_t, int64_t, int64_t, int64_t,
                              float*, bool, bool, float*, int64_t, int64_t, __mmask16);
constexpr TileTokensFn kTileTokens[kTTok] = {tile_tokens<1>, tile_tokens<2>,  tile_tokens<3>,  tile_tokens<4>,
                                             tile_tokens<5>, tile_tokens<6>,  tile_tokens<7>,  tile_tokens<8>,
                                             tile_tokens<9>, tile_tokens<10>, tile_tokens<11>, tile_tokens<12>};

void gemm_q8_transposed(const uint8_t* packed, const uint8_t* scale, int64_t k, const int8_t* q, const float* qs,
                        int64_t t, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t nb = k / 32;
  if (nb == 0) {  // K == 0: every output is the empty sum
    for (int64_t j = 0; j < t; ++j)
      for (int64_t r = r0; r < r1; ++r) y[j * ldy + r] = 0.f;
    return;
  }
  thread_local Scratch off_s, acc_s;
  int32_t* off = static_cast<int32_t*>(off_s.get(static_cast<size_t>(t * nb + 1) * 4));
  block_offsets(q, t * nb, off);
  float* accbuf = static_cast<float*>(acc_s.get(static_cast<size_t>(t * kTRows + 16) * 4));
  for (int64_t r = r0; r < r1; r += kTRows) {
    const int64_t nr = min64(kTRows, r1 - r);
    int64_t rows[kTRows];
    for (int l = 0; l < kTRows; ++l) rows[l] = r + min64(l, nr - 1);  // tail lanes repeat the last row
    const __mmask16 mask = static_cast<__mmask16>((1u << nr) - 1u);
    for (int64_t b0 = 0; b0 < nb; b0 += kTBlocks) {
      const int64_t n = min64(kTBlocks, nb - b0);
      decode_transposed(packed, scale, k, rows, b0, n);
      for (int64_t j0 = 0; j0 < t; j0 += kTTok) {
        const int64_t tn = min64(kTTok, t - j0);
        kTileTokens[tn - 1](q, qs, off, k, nb, j0, b0, n, accbuf, b0 == 0, b0 + n == nb, y, ldy, r, mask);
      }
    }
  }
}

// ---- Row kernel for T <= 2 (decode): rows streamed one after the other ----

// The E8M0-half bit patterns (kE8m0Half) of 16 scale bytes, computed in lanes: e >= 2: (e−1)<<23;
// e < 2: the subnormals 0x00200000<<e; e = 255: NaN.
inline __m512 e8m0_half16(const uint8_t* sr, __mmask16 m) {
  const __m512i e = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, sr));
  __m512i v = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
  v = _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), v,
                              _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e));
  v = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(255)), v, _mm512_set1_epi32(0x7fc00000));
  return _mm512_castsi512_ps(v);
}

// d[i]: int32 lanes 0..7 = partial sums of block 2i, 8..15 of block 2i + 1. Returns the 16 exact
// block dots in block order (integer adds: any order is exact).
inline __m512i reduce_block_pairs(const __m512i* d) {
  __m512i e[4], f[2];
  for (int i = 0; i < 4; ++i)
    e[i] =
        _mm512_add_epi32(_mm512_unpacklo_epi32(d[2 * i], d[2 * i + 1]), _mm512_unpackhi_epi32(d[2 * i], d[2 * i + 1]));
  for (int i = 0; i < 2; ++i)
    f[i] =
        _mm512_add_epi32(_mm512_unpacklo_epi64(e[2 * i], e[2 * i + 1]), _mm512_unpackhi_epi64(e[2 * i], e[2 * i + 1]));
  const __m512i g = _mm512_add_epi32(_mm512_shuffle_i32x4(f[0], f[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_i32x4(f[0], f[1], _MM_SHUFFLE(3, 1, 3, 1)));
  // g holds blocks 0 2 4 6 | 1 3 5 7 | 8 10 12 14 | 9 11 13 15
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15), g);
}

constexpr int kRowGroup = 4;  // rows whose fp32 running sums are interleaved (independent chains)

// N (<= 2) tokens; pbuf: [N][kRowGroup][nb] products. Every output is the scalar kernel's
// (...((0 + p_0) + p_1) + ...) with p_b = float(dot_b)·(ws_b·s_b).
template <int N>
void gemm_q8_rows(const uint8_t* packed, const uint8_t* scale, int64_t k, const int8_t* q, const float* qs,
                  const int32_t* off, float* y, int64_t ldy, int64_t r0, int64_t r1, float* pbuf) {
  const int64_t nb = k / 32, rb = k / 2;
  const __m512i tab = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t r = r0; r < r1; r += kRowGroup) {
    const int64_t nr = min64(kRowGroup, r1 - r);
    for (int64_t l = 0; l < nr; ++l) {
      const uint8_t* pr = packed + (r + l) * rb;
      const uint8_t* sr = scale + (r + l) * nb;
      for (int64_t b0 = 0; b0 < nb; b0 += 16) {
        const int64_t nblk = min64(16, nb - b0);
        __m512i d[N][8];
        for (int i = 0; i < 8; ++i) {
          const int64_t bb = b0 + 2 * i, nv = nblk - 2 * i;
          if (nv <= 0) {
            for (int n = 0; n < N; ++n) d[n][i] = _mm512_setzero_si512();
            continue;
          }
          const __m256i raw =
              nv >= 2 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pr + 16 * bb))
                      : _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pr + 16 * bb)));
          const __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
          const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);  // [lo0 lo1 hi0 hi1]
          const __m512i u =
              _mm512_shuffle_epi8(tab, _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0)));  // [lo0 hi0 lo1 hi1]
          for (int n = 0; n < N; ++n) {
            const int8_t* qa = q + n * k + 32 * bb;
            const __m512i a = nv >= 2 ? _mm512_loadu_si512(qa) : _mm512_maskz_loadu_epi8(0xFFFFFFFFull, qa);
            d[n][i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, a);
          }
        }
        const __mmask16 m = static_cast<__mmask16>((1u << nblk) - 1u);
        const __m512 ws = e8m0_half16(sr + b0, m);
        for (int n = 0; n < N; ++n) {
          const __m512i dot =
              _mm512_sub_epi32(reduce_block_pairs(d[n]), _mm512_maskz_loadu_epi32(m, off + n * nb + b0));
          const __m512 p =
              _mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(ws, _mm512_maskz_loadu_ps(m, qs + n * nb + b0)));
          _mm512_mask_storeu_ps(pbuf + (n * kRowGroup + l) * nb + b0, m, p);
        }
      }
    }
    for (int n = 0; n < N; ++n) {
      float acc[kRowGroup] = {0.f, 0.f, 0.f, 0.f};
      const float* pn = pbuf + n * kRowGroup * nb;
      if (nr == kRowGroup) {
        for (int64_t b = 0; b < nb; ++b)
          for (int l = 0; l < kRowGroup; ++l) acc[l] = acc[l] + pn[l * nb + b];
      } else {
        for (int64_t b = 0; b < nb; ++b)
          for (int64_t l = 0; l < nr; ++l) acc[l] = acc[l] + pn[l * nb + b];
      }
      for (int64_t l = 0; l < nr; ++l) y[n * ldy + r + l] = acc[l];
    }
  }
}

void gemm_q8_rows_entry(const uint8_t* packed, const uint8_t* scale, int64_t k, const int8_t* q, const float* qs,
                        int64_t t, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t nb = k / 32;
  if (nb == 0) {
    for (int64_t j = 0; j < t; ++j)
      for (int64_t r = r0; r < r1; ++r) y[j * ldy + r] = 0.f;
    return;
  }
  thread_local Scratch off_s, p_s;
  int32_t* off = static_cast<int32_t*>(off_s.get(static_cast<size_t>(t * nb + 16) * 4));
  block_offsets(q, t * nb, off);
  float* pbuf = static_cast<float*>(p_s.get(static_cast<size_t>(t * kRowGroup * nb + 16) * 4));
  if (t == 1) gemm_q8_rows<1>(packed, scale, k, q, qs, off, y, ldy, r0, r1, pbuf);
  else gemm_q8_rows<2>(packed, scale, k, q, qs, off, y, ldy, r0, r1, pbuf);
}

}  // namespace

void gemm_mxfp4_q8_rowwise(const uint8_t* packed, const uint8_t* scale, int64_t k, const int8_t* q, const float* qs,
                           int64_t t, float* y, int64_t ldy, int64_t r0, int64_t r1) {
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

void gemm_mxfp4_q8(const uint8_t* packed, const uint8_t* scale, int64_t k, const int8_t* q, const float* qs, int64_t t,
                   float* y, int64_t ldy, int64_t r0, int64_t r1) {
  if (r1 <= r0 || t <= 0) return;
  if (t <= 2) return gemm_q8_rows_entry(packed, scale, k, q, qs, t, y, ldy, r0, r1);
  gemm_q8_transposed(packed, scale, k, q, qs, t, y, ldy, r0, r1);
}

void gemm_mxfp4_f32(const uint8_t* packed, const uint8_t* scale, int64_t k, const float* x, int64_t ldx, int64_t t,
                    float* y, int64_t ldy, int64_t r0, int64_t r1) {
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
