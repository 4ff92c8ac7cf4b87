// AVX-512 VNNI int8 kernel of the q8 trunk (kernel_table.h gemm_q8_q8; layout in
// kernels/q8q4_trunk.h): zmm lanes = the 16 rows of a tile; per 32-block, 8 vpdpbusd of a
// 64-byte weight load (4 inputs x 16 rows, made unsigned by q + 128 = q ^ 0x80) with the
// token's 4 activation bytes broadcast, the accumulator started at -128·Σ xq so the block sum is
// the exact Σ q_w·q_x; then acc = fma(float(sum), d·s, acc) per block, as the scalar kernel.
// Up to 8 tokens share each weight load (register tile 16 rows x 8 tokens: 8 int32 + 8 fp32
// accumulators), so T = 1..8 read the weights once from memory. On CPUs with AMX-INT8 (and an
// OS that grants the tile state) T >= kAmxMinTokens take the AMX kernel below instead: the same
// integer sums and fp32 chain, so the same bits.
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <utility>

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

void gemm_q8_q8_avx512_vnni(const QuantMatrix& w, const int8_t* xq, const float* xs, const int32_t* xsum, int64_t T,
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

namespace {

// ---- AMX-INT8 (Sapphire Rapids and later): one tdpbssd per 32-block computes the exact block
// sums of up to 16 tokens x 16 rows at once (A = the tokens' 32 bytes of the block, B = the
// tile's 512 bytes, which are already AMX's B layout: 8 dwords x 16 rows x 4 bytes). The sums go
// through a 1 KiB buffer into the same fp32 chain as above, so the bits are the VNNI kernel's.

/// Asks the OS for the AMX tile state once per process (Linux arch_prctl); false when the CPU or
/// the OS lacks it.
bool amx_usable_once() {
  unsigned a, b, c, d;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 0, a, b, c, d);
  if (!(d & (1u << 24)) || !(d & (1u << 25))) return false;  // AMX-TILE, AMX-INT8
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  // XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA) enabled by the OS.
  return (_xgetbv(0) & (3ull << 17)) == (3ull << 17);
}

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

template <int N>
void amx_tile(const int8_t* wt, const float* dt, int64_t G, int64_t K, const int8_t* xq, const float* xs,
              float* y, int64_t ldy, __mmask16 m) {
  alignas(64) int32_t cb[2][16 * 16];
  __m512 acc[N];
  for (int t = 0; t < N; ++t) acc[t] = _mm512_setzero_ps();
  auto fp_block = [&](const int32_t* c, int64_t b) {
    const __m512 dv = _mm512_loadu_ps(dt + b * 16);
    for (int t = 0; t < N; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * t)),
                               _mm512_mul_ps(dv, _mm512_set1_ps(xs[t * G + b])), acc[t]);
  };
  // Tiles 0/2/4 take even blocks, 1/3/5 odd ones, so the next block's product overlaps this
  // block's fp32 work.
  _tile_zero(0);
  _tile_loadd(2, xq, K);
  _tile_loadd(4, wt, 64);
  _tile_dpbssd(0, 2, 4);
  for (int64_t b = 0; b < G; b += 2) {
    if (b + 1 < G) {
      _tile_zero(1);
      _tile_loadd(3, xq + (b + 1) * 32, K);
      _tile_loadd(5, wt + (b + 1) * 512, 64);
      _tile_dpbssd(1, 3, 5);
    }
    _tile_stored(0, cb[0], 64);
    fp_block(cb[0], b);
    if (b + 1 < G) {
      if (b + 2 < G) {
        _tile_zero(0);
        _tile_loadd(2, xq + (b + 2) * 32, K);
        _tile_loadd(4, wt + (b + 2) * 512, 64);
        _tile_dpbssd(0, 2, 4);
      }
      _tile_stored(1, cb[1], 64);
      fp_block(cb[1], b + 1);
    }
  }
  for (int t = 0; t < N; ++t) _mm512_mask_storeu_ps(y + t * ldy, m, acc[t]);
}

using AmxTileFn = void (*)(const int8_t*, const float*, int64_t, int64_t, const int8_t*, const float*, float*, int64_t,
                           __mmask16);
template <int... I>
constexpr auto amx_table(std::integer_sequence<int, I...>) {
  return std::array<AmxTileFn, sizeof...(I)>{&amx_tile<I + 1>...};
}
constexpr auto kAmxTiles = amx_table(std::make_integer_sequence<int, 16>{});

}  // namespace

bool q8_amx_available() {
  static const bool ok = amx_usable_once();
  return ok;
}

void gemm_q8_q8_amx(const QuantMatrix& w, const int8_t* xq, const float* xs, const int32_t* /*xsum*/, int64_t T,
                    float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t G = w.cols / 32, K = w.cols;
  // Row tiles outside, token chunks of <= 16 inside: the weights are read from memory once for
  // any T (a tile's 16·K bytes stay in L2 across its chunks); the tile configuration is reloaded
  // only when the chunk size changes.
  int configured = 0;
  for (int64_t r = r0; r < r1; r += 16) {
    const int64_t nr = r1 - r < 16 ? r1 - r : 16;
    for (int64_t t0 = 0; t0 < T; t0 += 16) {
      const int nt = static_cast<int>(T - t0 < 16 ? T - t0 : 16);
      if (nt != configured) {
        TileConfig cfg;
        for (int i : {0, 1}) {
          cfg.rows[i] = static_cast<uint8_t>(nt), cfg.colsb[i] = 64;          // C: tokens x 16 int32
          cfg.rows[2 + i] = static_cast<uint8_t>(nt), cfg.colsb[2 + i] = 32;  // A: tokens x 32 bytes
          cfg.rows[4 + i] = 8, cfg.colsb[4 + i] = 64;                         // B: 8 dwords x 16 rows x 4
        }
        _tile_loadconfig(&cfg);
        configured = nt;
      }
      kAmxTiles[static_cast<size_t>(nt - 1)](w.q.data() + r * K, w.d.data() + r * G, G, K, xq + t0 * K, xs + t0 * G,
                                             y + t0 * ldy + r, ldy, static_cast<__mmask16>((1u << nr) - 1u));
    }
  }
  if (configured) _tile_release();
}

void gemm_q8_q8_avx512(const QuantMatrix& w, const int8_t* xq, const float* xs, const int32_t* xsum, int64_t T,
                       float* y, int64_t ldy, int64_t r0, int64_t r1) {
  if (T >= kAmxMinTokens && q8_amx_available()) return gemm_q8_q8_amx(w, xq, xs, xsum, T, y, ldy, r0, r1);
  gemm_q8_q8_avx512_vnni(w, xq, xs, xsum, T, y, ldy, r0, r1);
}

}  // namespace k3::detail
