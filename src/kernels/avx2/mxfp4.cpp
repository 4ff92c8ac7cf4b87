// AVX2 MXFP4 GEMV/GEMM on the packed bytes (algorithms.md §5.3), never dequantizing a matrix.
// Integer route: a block's 16 bytes -> 32 nibbles (low nibbles then high nibbles, matching the
// Q8 "nibble order"), vpshufb through the doubled-E2M1 table T2 (signed) and |T2| (unsigned),
// the weight sign moved onto the activation (vpsignb), vpmaddubsw (pairs <= 2·12·127, no int16
// overflow) + vpmaddwd -> 8 int32 partial sums, converted once per block and scaled by
// s_a·2^(e-128). Exact route (reference): the same decode widened to fp32 and FMA with fp32 x.
// Tokens (T > 1) reuse one decoded block for up to 4 tokens.
// gemm_mxfp4_q8 (the kernel-table entry) instead works on 8-row tiles with the rows in the fp32
// lanes (see "Row-tile Q8 GEMM" below); the per-row kernel above remains as
// gemm_mxfp4_q8_rowwise for the benchmark.
#include <stdlib.h>

#include "kernels/avx2/avx2_kernels.h"
#include "kernels/avx2/avx2_util.h"
#include "kernels/mxfp4_x86_common.h"

namespace k3::avx2 {

using namespace k3::mxfp4_x86;  // E8m0HalfBits table, Scratch, min64, block_offsets

void gemm_mxfp4_q8_rowwise(const uint8_t* packed, const uint8_t* scale, int64_t k, const int8_t* q, const float* qs,
                           int64_t t, float* y, int64_t ldy, int64_t r0, int64_t r1);

namespace {

inline __m256i t2_table() {
  return _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2,
                          -3, -4, -6, -8, -12);
}
inline __m256i t2_abs_table() {
  return _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6,
                          8, 12);
}
// 32 nibbles of one block: lanes 0..15 = low nibbles (even columns), 16..31 = high (odd).
inline __m256i nibbles(const uint8_t* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i v = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}
inline __m256 block_dot(__m256i aw, __m256i w, const int8_t* qp) {
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qp));
  const __m256i p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(a, w));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

float row_q8_1(const uint8_t* pr, const uint8_t* sr, int64_t nb, const int8_t* q, const float* qs) {
  const __m256i tab = t2_table(), tabs = t2_abs_table();
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m256i n0 = nibbles(pr + 16 * b), n1 = nibbles(pr + 16 * b + 16);
    const __m256 d0 = block_dot(_mm256_shuffle_epi8(tabs, n0), _mm256_shuffle_epi8(tab, n0), q + 32 * b);
    const __m256 d1 = block_dot(_mm256_shuffle_epi8(tabs, n1), _mm256_shuffle_epi8(tab, n1), q + 32 * b + 32);
    acc0 = _mm256_fmadd_ps(d0, _mm256_set1_ps(e8m0_half(sr[b]) * qs[b]), acc0);
    acc1 = _mm256_fmadd_ps(d1, _mm256_set1_ps(e8m0_half(sr[b + 1]) * qs[b + 1]), acc1);
  }
  if (b < nb) {
    const __m256i n0 = nibbles(pr + 16 * b);
    const __m256 d0 = block_dot(_mm256_shuffle_epi8(tabs, n0), _mm256_shuffle_epi8(tab, n0), q + 32 * b);
    acc0 = _mm256_fmadd_ps(d0, _mm256_set1_ps(e8m0_half(sr[b]) * qs[b]), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

template <int N>
void row_q8_n(const uint8_t* pr, const uint8_t* sr, int64_t nb, int64_t k, const int8_t* q, const float* qs, float* y,
              int64_t ldy) {
  const __m256i tab = t2_table(), tabs = t2_abs_table();
  __m256 acc[N];
  for (int n = 0; n < N; ++n) acc[n] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i nib = nibbles(pr + 16 * b);
    const __m256i w = _mm256_shuffle_epi8(tab, nib), aw = _mm256_shuffle_epi8(tabs, nib);
    const float ws = e8m0_half(sr[b]);
    for (int n = 0; n < N; ++n) {
      const __m256 d = block_dot(aw, w, q + n * k + 32 * b);
      acc[n] = _mm256_fmadd_ps(d, _mm256_set1_ps(ws * qs[n * nb + b]), acc[n]);
    }
  }
  for (int n = 0; n < N; ++n) y[n * ldy] = hsum(acc[n]);
}

template <int N>
void row_f32_n(const uint8_t* pr, const uint8_t* sr, int64_t nb, const float* x, int64_t ldx, float* y, int64_t ldy) {
  const __m256i tab = t2_table();
  __m256 acc[N];
  for (int n = 0; n < N; ++n) acc[n] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i w = _mm256_shuffle_epi8(tab, nibbles(pr + 16 * b));
    const __m128i lo = _mm256_castsi256_si128(w), hi = _mm256_extracti128_si256(w, 1);
    const __m128i c0 = _mm_unpacklo_epi8(lo, hi), c1 = _mm_unpackhi_epi8(lo, hi);  // natural order
    const __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c0));
    const __m256 f1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(c0, 8)));
    const __m256 f2 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c1));
    const __m256 f3 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(c1, 8)));
    const __m256 ws = _mm256_set1_ps(e8m0_half(sr[b]));
    for (int n = 0; n < N; ++n) {
      const float* xb = x + n * ldx + 32 * b;
      __m256 blk = _mm256_mul_ps(f0, _mm256_loadu_ps(xb));
      blk = _mm256_fmadd_ps(f1, _mm256_loadu_ps(xb + 8), blk);
      blk = _mm256_fmadd_ps(f2, _mm256_loadu_ps(xb + 16), blk);
      blk = _mm256_fmadd_ps(f3, _mm256_loadu_ps(xb + 24), blk);
      acc[n] = _mm256_fmadd_ps(blk, ws, acc[n]);
    }
  }
  for (int n = 0; n < N; ++n) y[n * ldy] = hsum(acc[n]);
}

// ---- Row-tile Q8 GEMM (every T): 8 weight rows in the 8 fp32 lanes of one accumulator ----
// Weights are decoded to u = T2 + 12 in [0, 24] (unsigned, so vpmaddubsw needs no vpsignb): for
// T <= 4 in registers once per block for all tokens, else once per tile into an L1 buffer; per (token, block) the 8 rows' int16 pair sums are reduced
// to 8 exact int32 block dots by a vphaddw / vpmaddwd / vpackssdw tree (no horizontal sum per
// output), the 12·Σq term of that (token, block) is subtracted, and the dot is scaled by
// 2^(e-128)·s_a and added to the running fp32 sum. Every output is therefore
//   y = (...((0 + dot_0·(ws_0·s_0)) + dot_1·(ws_1·s_1)) + ...) + dot_{nb-1}·(ws·s)_{nb-1}
// in block order, each product and sum rounded to fp32 (no FMA): the scalar kernel's formula, so
// the outputs are bit-identical to it, and independent of T, of a token's position in the batch
// and of r0/r1.
// Bounds: pair sum <= 2·24·128 = 6144, after vphaddw 12288, after vpmaddwd 24576 (packs exact).

inline __m256i t2u_table() {
  return _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0, 12, 13, 14, 15, 16, 18, 20, 24, 12,
                          11, 10, 9, 8, 6, 4, 0);
}

constexpr int kTileRows = 8;
constexpr int64_t kChunkBlocks = 64;  // decoded tile = 64·8·32 B = 16 KiB (stays in L1)
alignas(32) thread_local uint8_t g_dec[kChunkBlocks * kTileRows * 32];
alignas(32) thread_local uint32_t g_ws[kChunkBlocks * kTileRows];

// Decode blocks [b0, b0 + n) of the tile's rows (row index per lane) into g_dec / g_ws.
inline void decode_tile(const uint8_t* packed, const uint8_t* scale, int64_t k, const int64_t* rows, int64_t b0,
                        int64_t n) {
  const __m256i tab = t2u_table(), m4 = _mm256_set1_epi8(0x0F);
  const int64_t nb = k / 32;
  for (int l = 0; l < kTileRows; ++l) {
    const uint8_t* pr = packed + rows[l] * (k / 2) + 16 * b0;
    const uint8_t* sr = scale + rows[l] * nb + b0;
    uint8_t* d = g_dec + 32 * l;
    int64_t i = 0;
    for (; i + 2 <= n; i += 2) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pr + 16 * i));
      const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      const __m256i x0 = _mm256_shuffle_epi8(tab, _mm256_permute2x128_si256(lo, hi, 0x20));
      const __m256i x1 = _mm256_shuffle_epi8(tab, _mm256_permute2x128_si256(lo, hi, 0x31));
      _mm256_store_si256(reinterpret_cast<__m256i*>(d + 256 * i), x0);
      _mm256_store_si256(reinterpret_cast<__m256i*>(d + 256 * (i + 1)), x1);
    }
    if (i < n)
      _mm256_store_si256(reinterpret_cast<__m256i*>(d + 256 * i), _mm256_shuffle_epi8(tab, nibbles(pr + 16 * i)));
    for (int64_t j = 0; j < n; ++j) g_ws[kTileRows * j + l] = kE8m0HalfBits[sr[j]];
  }
}

// Exact int32 dots of 8 rows' u-bytes (p(l) = vpmaddubsw(u_l, a)) with one activation block.
template <class P>
inline __m256i tile_block_dot(P p, __m256i ones16) {
  const __m256i h01 = _mm256_hadd_epi16(p(0), p(1)), h23 = _mm256_hadd_epi16(p(2), p(3));
  const __m256i h45 = _mm256_hadd_epi16(p(4), p(5)), h67 = _mm256_hadd_epi16(p(6), p(7));
  const __m256i m0 = _mm256_packs_epi32(_mm256_madd_epi16(h01, ones16), _mm256_madd_epi16(h23, ones16));
  const __m256i m1 = _mm256_packs_epi32(_mm256_madd_epi16(h45, ones16), _mm256_madd_epi16(h67, ones16));
  const __m256i s0 = _mm256_madd_epi16(m0, ones16), s1 = _mm256_madd_epi16(m1, ones16);
  return _mm256_add_epi32(_mm256_permute2x128_si256(s0, s1, 0x20), _mm256_permute2x128_si256(s0, s1, 0x31));
}
inline __m256i tile_block_dot(const uint8_t* d, __m256i a, __m256i ones16) {
  return tile_block_dot(
      [&](int l) { return _mm256_maddubs_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(d + 32 * l)), a); },
      ones16);
}

// acc + float(dot)·(ws·s_a), rounded after the product and after the sum (no FMA), exactly as
// the scalar kernel computes it, so the AVX2 and scalar results are bit-identical.
inline __m256 scaled_add(__m256i dot, __m256 ws, float sa, __m256 acc) {
  __m256 p = _mm256_mul_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(ws, _mm256_set1_ps(sa)));
  __asm__("" : "+x"(p));  // keep the compiler from contracting the mul + add into an FMA
  return _mm256_add_ps(acc, p);
}

inline void store_tile(float* y, __m256 acc, int64_t nr) {
  if (nr == kTileRows) {
    _mm256_storeu_ps(y, acc);
  } else {
    alignas(32) float tmp[kTileRows];
    _mm256_store_ps(tmp, acc);
    for (int64_t l = 0; l < nr; ++l) y[l] = tmp[l];
  }
}

// Few tokens (N <= 4): the same arithmetic as gemm_q8_tiles (bit-identical outputs),
// decoding each row's block in registers once for the N tokens instead of through the tile buffer.
template <int N>
void gemm_q8_direct(const uint8_t* packed, const uint8_t* scale, int64_t k, const int8_t* q, const float* qs, float* y,
                    int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t nb = k / 32;
  thread_local Scratch off_s, ws_s;
  int32_t* off = static_cast<int32_t*>(off_s.get(static_cast<size_t>(N * nb + 1) * 4));
  uint32_t* ws = static_cast<uint32_t*>(ws_s.get(static_cast<size_t>(nb * kTileRows + 1) * 4));
  block_offsets(q, N * nb, off);
  const __m256i tab = t2u_table(), ones16 = _mm256_set1_epi16(1);
  for (int64_t r = r0; r < r1; r += kTileRows) {
    const int64_t nr = min64(kTileRows, r1 - r);
    const uint8_t* pr[kTileRows];
    for (int l = 0; l < kTileRows; ++l) {
      const int64_t row = r + min64(l, nr - 1);
      pr[l] = packed + row * (k / 2);
      const uint8_t* sr = scale + row * nb;
      for (int64_t b = 0; b < nb; ++b) ws[kTileRows * b + l] = kE8m0HalfBits[sr[b]];
    }
    __m256 acc[N];
    for (int j = 0; j < N; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      __m256i u[kTileRows];
      for (int l = 0; l < kTileRows; ++l) u[l] = _mm256_shuffle_epi8(tab, nibbles(pr[l] + 16 * b));
      const __m256 w = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ws + kTileRows * b)));
      for (int j = 0; j < N; ++j) {
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + j * k + 32 * b));
        const __m256i dot =
            _mm256_sub_epi32(tile_block_dot([&](int l) { return _mm256_maddubs_epi16(u[l], a); }, ones16),
                             _mm256_set1_epi32(off[j * nb + b]));
        acc[j] = scaled_add(dot, w, qs[j * nb + b], acc[j]);
      }
    }
    for (int j = 0; j < N; ++j) store_tile(y + j * ldy + r, acc[j], nr);
  }
}

void gemm_q8_tiles(const uint8_t* packed, const uint8_t* scale, int64_t k, const int8_t* q, const float* qs, int64_t t,
                   float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t nb = k / 32;
  if (nb == 0) {  // K == 0: every output is the empty sum
    for (int64_t j = 0; j < t; ++j)
      for (int64_t r = r0; r < r1; ++r) y[j * ldy + r] = 0.f;
    return;
  }
  thread_local Scratch off_s, acc_s;
  int32_t* off = static_cast<int32_t*>(off_s.get(static_cast<size_t>(t * nb + 1) * 4));
  block_offsets(q, t * nb, off);
  const bool chunked = nb > kChunkBlocks;
  float* accbuf = chunked ? static_cast<float*>(acc_s.get(static_cast<size_t>(t * kTileRows) * 4)) : nullptr;
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t r = r0; r < r1; r += kTileRows) {
    const int64_t nr = min64(kTileRows, r1 - r);
    int64_t rows[kTileRows];
    for (int l = 0; l < kTileRows; ++l) rows[l] = r + min64(l, nr - 1);
    for (int64_t b0 = 0; b0 < nb; b0 += kChunkBlocks) {
      const int64_t n = min64(kChunkBlocks, nb - b0);
      const bool first = b0 == 0, last = b0 + n == nb;
      decode_tile(packed, scale, k, rows, b0, n);
      auto finish = [&](int64_t j, __m256 acc) {
        if (!last) _mm256_storeu_ps(accbuf + kTileRows * j, acc);
        else store_tile(y + j * ldy + r, acc, nr);
      };
      auto start = [&](int64_t j) { return first ? _mm256_setzero_ps() : _mm256_loadu_ps(accbuf + kTileRows * j); };
      for (int64_t j = 0; j < t; ++j) {
        const int8_t* qj = q + j * k + 32 * b0;
        const float* sj = qs + j * nb + b0;
        const int32_t* oj = off + j * nb + b0;
        __m256 acc = start(j);
        for (int64_t i = 0; i < n; ++i) {
          const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qj + 32 * i));
          const __m256i dot = _mm256_sub_epi32(tile_block_dot(g_dec + 256 * i, a, ones16), _mm256_set1_epi32(oj[i]));
          const __m256 ws =
              _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(g_ws + kTileRows * i)));
          acc = scaled_add(dot, ws, sj[i], acc);
        }
        finish(j, acc);
      }
    }
  }
}

}  // namespace

// Row tiles for every T (T <= 4 decoding in registers, larger T through the tile buffer); both
// compute each output identically, so a token's outputs do not depend on T or on r0/r1.
void gemm_mxfp4_q8(const uint8_t* packed, const uint8_t* scale, int64_t k, const int8_t* q, const float* qs, int64_t t,
                   float* y, int64_t ldy, int64_t r0, int64_t r1) {
  if (r1 <= r0 || t <= 0) return;
  switch (t) {
    case 1: return gemm_q8_direct<1>(packed, scale, k, q, qs, y, ldy, r0, r1);
    case 2: return gemm_q8_direct<2>(packed, scale, k, q, qs, y, ldy, r0, r1);
    case 3: return gemm_q8_direct<3>(packed, scale, k, q, qs, y, ldy, r0, r1);
    case 4: return gemm_q8_direct<4>(packed, scale, k, q, qs, y, ldy, r0, r1);
    default: break;
  }
  gemm_q8_tiles(packed, scale, k, q, qs, t, y, ldy, r0, r1);
}

// The previous kernel (one row at a time, lanes within a block, a horizontal sum per output),
// kept for bench/kernels.cpp's old-vs-new table. Not in the kernel table.
void gemm_mxfp4_q8_rowwise(const uint8_t* packed, const uint8_t* scale, int64_t k, const int8_t* q, const float* qs,
                           int64_t t, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t nb = k / 32;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* pr = packed + r * (k / 2);
    const uint8_t* sr = scale + r * nb;
    if (t == 1) {
      y[r] = row_q8_1(pr, sr, nb, q, qs);
      continue;
    }
    int64_t j = 0;
    for (; j + 4 <= t; j += 4) row_q8_n<4>(pr, sr, nb, k, q + j * k, qs + j * nb, y + j * ldy + r, ldy);
    switch (t - j) {
      case 3: row_q8_n<3>(pr, sr, nb, k, q + j * k, qs + j * nb, y + j * ldy + r, ldy); break;
      case 2: row_q8_n<2>(pr, sr, nb, k, q + j * k, qs + j * nb, y + j * ldy + r, ldy); break;
      case 1: row_q8_n<1>(pr, sr, nb, k, q + j * k, qs + j * nb, y + j * ldy + r, ldy); break;
      default: break;
    }
  }
}

void gemm_mxfp4_f32(const uint8_t* packed, const uint8_t* scale, int64_t k, const float* x, int64_t ldx, int64_t t,
                    float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t nb = k / 32;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* pr = packed + r * (k / 2);
    const uint8_t* sr = scale + r * nb;
    int64_t j = 0;
    for (; j + 4 <= t; j += 4) row_f32_n<4>(pr, sr, nb, x + j * ldx, ldx, y + j * ldy + r, ldy);
    switch (t - j) {
      case 3: row_f32_n<3>(pr, sr, nb, x + j * ldx, ldx, y + j * ldy + r, ldy); break;
      case 2: row_f32_n<2>(pr, sr, nb, x + j * ldx, ldx, y + j * ldy + r, ldy); break;
      case 1: row_f32_n<1>(pr, sr, nb, x + j * ldx, ldx, y + j * ldy + r, ldy); break;
      default: break;
    }
  }
}

}  // namespace k3::avx2
