// AVX-512 BF16 dot-product GEMMs (vdpbf16ps) of the 'bf16' and 'mxfp8' numerics modes
// (kernel_table.h gemm_bf16_dp / gemm_mxfp4_dp: the arithmetic every ISA reproduces).
//
// Packed panels: 32 weight rows x a K block (kKc) are transposed once per (token tile, K block)
// into [pair p][row] dwords (each dword = the bf16 pair (w[2p], w[2p+1]) of one row: 2 zmm per
// pair), so the micro-kernel's accumulators are Y[t, r..r+32) vectors: lane r of an accumulator
// is output (t, r), and vdpbf16ps adds w[2p+1]·x[2p+1] then w[2p]·x[2p] to it (each product
// exact in fp32, each add rounded: the pair-chain order of kernel_table.h, probed on the CPU).
// A later K block starts from the stored Y, so every output is one chain over all of K, whatever
// the token count, the row range or the tiling (batch invariance; tests/kernels/test_gemm_dp.cpp).
// Register block: 2 zmm of rows x up to 12 tokens (24 accumulators, 2 weight loads and 12 pair
// broadcasts per 24 vdpbf16ps). The K block (256) keeps the packed panel (16 KiB) and 12
// tokens' X (6 KiB) in L1; the token tile (144) keeps the X tile in L2.
//
// Weights: bf16 rows (trunk) or MXFP4 rows decoded while packing: each 32-block's 16 E2M1
// values times its E8M0 scale form a 16-entry bf16 table (exact: E2M1 x 2^k is a bf16), looked
// up per nibble with vpermw. Activations arrive as bf16 (rounded, or MXFP8-quantized, by ops.cpp).
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/avx512_util.h"

namespace k3::avx512 {

namespace {

constexpr int kPR = 32;       // weight rows per panel (2 zmm)
constexpr int kTB = 12;       // tokens per micro-kernel call
constexpr int64_t kKc = 256;  // K per panel (128 pairs)
constexpr int64_t kTc = 144;  // tokens per X tile

alignas(64) thread_local uint32_t g_pack[(kKc / 2) * kPR];

// 16 x 16 transpose of dwords: in[i] = 16 dwords of row i -> out[j] = dword j of rows 0..15.
inline void transpose16(__m512i r[16]) {
  __m512i a[16], b[16];
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    b[4 * i + 0] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
  }
  // b[4i + c] lane L = rows 4i..4i+3 at column 4L + c
  for (int c = 0; c < 4; ++c) {
    const __m512i s0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x88);
    const __m512i s1 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xDD);
    const __m512i s2 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x88);
    const __m512i s3 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xDD);
    r[c] = _mm512_shuffle_i32x4(s0, s2, 0x88);
    r[8 + c] = _mm512_shuffle_i32x4(s0, s2, 0xDD);
    r[4 + c] = _mm512_shuffle_i32x4(s1, s3, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(s1, s3, 0xDD);
  }
}

// Loads 16 pairs (32 bf16, columns c..c+32 of the block, zero past kn) of a bf16 weight row.
struct Bf16Rows {
  const uint16_t* w;
  int64_t ldw;
  int64_t k0;
  __m512i load(int64_t row, int64_t c, int64_t kn) const {
    return _mm512_maskz_loadu_epi16(tail_mask32(kn - c), w + row * ldw + k0 + c);
  }
  // The same 64 bytes of row `row` (the next panel's): K blocks of a row are not read in
  // sequence, so the stream prefetchers do not see them coming. (Address arithmetic in
  // integers: the row may lie past the matrix, which a prefetch tolerates.)
  void prefetch(int64_t row, int64_t c) const {
    _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(w) +
                                               static_cast<uintptr_t>((row * ldw + k0 + c) * 2)),
                 _MM_HINT_T0);
  }
};

// Decodes one MXFP4 32-block (c is a multiple of 32; K % 32 == 0) of a row to 32 bf16.
struct Mxfp4Rows {
  const uint8_t* packed;
  const uint8_t* scale;
  int64_t k;
  int64_t k0;
  __m512i load(int64_t row, int64_t c, int64_t /*kn*/) const {
    const int64_t col = k0 + c;
    const uint32_t e = scale[row * (k / 32) + col / 32];
    const uint32_t sbits = e == 255 ? 0x7fc00000u : (e >= 1 ? e << 23 : 0x00400000u);
    const __m512 e2m1 =
        _mm512_setr_ps(0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -0.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f);
    // exact products (E2M1 x 2^k), so their top 16 bits are the bf16 values
    const __m512 v = _mm512_mul_ps(e2m1, _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(sbits))));
    const __m256i tab = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16));
    const __m512i d =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + row * (k / 2) + col / 2)));
    const __m512i idx =
        _mm512_or_si512(_mm512_and_si512(d, _mm512_set1_epi32(0xF)), _mm512_slli_epi32(_mm512_srli_epi32(d, 4), 16));
    return _mm512_permutexvar_epi16(idx, _mm512_zextsi256_si512(tab));
  }
  void prefetch(int64_t row, int64_t c) const {  // one line covers 4 blocks of packed bytes
    if (((k0 + c) & 127) == 0)
      _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(packed) +
                                                 static_cast<uintptr_t>(row * (k / 2) + (k0 + c) / 2)),
                   _MM_HINT_T0);
  }
};

// Packs rows [r, r + rn) (rn <= 32; missing rows are zero) of a K block of kn columns into g_pack,
// prefetching the same columns of the next panel's rows when it exists (r + 32 < r_end).
template <class Rows>
void pack_panel(const Rows& rows, int64_t r, int rn, int64_t kn, int64_t r_end) {
  const int64_t np = (kn + 1) / 2;
  for (int half = 0; half < 2; ++half) {
    for (int64_t c = 0; c < kn; c += 32) {
      __m512i v[16];
      for (int i = 0; i < 16; ++i) {
        const int row = 16 * half + i;
        v[i] = row < rn ? rows.load(r + row, c, kn) : _mm512_setzero_si512();
        if (r + kPR + row < r_end) rows.prefetch(r + kPR + row, c);
      }
      transpose16(v);
      const int64_t p0 = c / 2;
      const int64_t pn = np - p0 < 16 ? np - p0 : 16;
      for (int64_t j = 0; j < pn; ++j) _mm512_store_si512(g_pack + (p0 + j) * kPR + 16 * half, v[j]);
    }
  }
}

inline __mmask16 rows_mask(int rn, int half) {
  const int n = rn - 16 * half;
  return n <= 0 ? __mmask16(0) : tail_mask16(n);
}

// Y[n, r..r+rn) for n < N: continue each output's chain over np pairs of the packed panel.
template <int N>
void micro(int64_t np, const uint16_t* xb, int64_t ldxb, float* y, int64_t ldy, bool from_y, int rn) {
  __m512 a0[N], a1[N];
  const __mmask16 m0 = rows_mask(rn, 0), m1 = rows_mask(rn, 1);
#pragma GCC unroll 12
  for (int n = 0; n < N; ++n) {
    if (from_y) {
      a0[n] = _mm512_maskz_loadu_ps(m0, y + n * ldy);
      a1[n] = _mm512_maskz_loadu_ps(m1, y + n * ldy + 16);
    } else {
      a0[n] = _mm512_setzero_ps();
      a1[n] = _mm512_setzero_ps();
    }
  }
  const uint32_t* pk = g_pack;
  for (int64_t p = 0; p < np; ++p, pk += kPR) {
    const __m512bh w0 = (__m512bh)_mm512_load_si512(pk);
    const __m512bh w1 = (__m512bh)_mm512_load_si512(pk + 16);
#pragma GCC unroll 12
    for (int n = 0; n < N; ++n) {
      int32_t xp;
      __builtin_memcpy(&xp, xb + n * ldxb + 2 * p, 4);
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(xp);
      a0[n] = _mm512_dpbf16_ps(a0[n], w0, xv);
      a1[n] = _mm512_dpbf16_ps(a1[n], w1, xv);
    }
  }
#pragma GCC unroll 12
  for (int n = 0; n < N; ++n) {
    _mm512_mask_storeu_ps(y + n * ldy, m0, a0[n]);
    _mm512_mask_storeu_ps(y + n * ldy + 16, m1, a1[n]);
  }
}

using MicroFn = void (*)(int64_t, const uint16_t*, int64_t, float*, int64_t, bool, int);
constexpr MicroFn kMicro[kTB] = {micro<1>, micro<2>, micro<3>, micro<4>,  micro<5>,  micro<6>,
                                 micro<7>, micro<8>, micro<9>, micro<10>, micro<11>, micro<12>};

template <class Rows, class MakeRows>
void gemm_dp(const MakeRows& make_rows, int64_t k, const uint16_t* xb, int64_t ldxb, int64_t t, float* y, int64_t ldy,
             int64_t r0, int64_t r1) {
  if (k == 0) {
    for (int64_t j = 0; j < t; ++j)
      for (int64_t r = r0; r < r1; ++r) y[j * ldy + r] = 0.f;
    return;
  }
  for (int64_t t0 = 0; t0 < t; t0 += kTc) {
    const int64_t tn = t - t0 < kTc ? t - t0 : kTc;
    const int64_t nblk = (tn + kTB - 1) / kTB, base = tn / nblk, extra = tn % nblk;
    for (int64_t k0 = 0; k0 < k; k0 += kKc) {
      const int64_t kn = k - k0 < kKc ? k - k0 : kKc;
      const int64_t np = (kn + 1) / 2;
      const Rows rows = make_rows(k0);
      for (int64_t r = r0; r < r1; r += kPR) {
        const int rn = static_cast<int>(r1 - r < kPR ? r1 - r : kPR);
        pack_panel(rows, r, rn, kn, r1);
        int64_t j = 0;
        for (int64_t bi = 0; bi < nblk; ++bi) {
          const int64_t nn = base + (bi < extra ? 1 : 0);
          kMicro[nn - 1](np, xb + (t0 + j) * ldxb + k0, ldxb, y + (t0 + j) * ldy + r, ldy, k0 > 0, rn);
          j += nn;
        }
      }
    }
  }
}

}  // namespace

void gemm_bf16_dp(const uint16_t* w, int64_t ldw, int64_t k, const uint16_t* xb, int64_t ldxb, int64_t t, float* y,
                  int64_t ldy, int64_t r0, int64_t r1) {
  gemm_dp<Bf16Rows>([&](int64_t k0) { return Bf16Rows{w, ldw, k0}; }, k, xb, ldxb, t, y, ldy, r0, r1);
}

void gemm_mxfp4_dp(const uint8_t* packed, const uint8_t* scale, int64_t k, const uint16_t* xb, int64_t ldxb, int64_t t,
                   float* y, int64_t ldy, int64_t r0, int64_t r1) {
  gemm_dp<Mxfp4Rows>([&](int64_t k0) { return Mxfp4Rows{packed, scale, k, k0}; }, k, xb, ldxb, t, y, ldy, r0, r1);
}

}  // namespace k3::avx512
