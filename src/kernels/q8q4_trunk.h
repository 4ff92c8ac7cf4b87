// Trunk quantization at load (`--trunk-type q8|q4`): a BF16 weight W [rows, cols] is
// re-encoded once into groups of 32 consecutive inputs of one row with one fp32 scale each,
// symmetric (no zero point), and the trunk's GEMV/GEMM then read the smaller encoding:
//   q8: d = amax/127, q = RNE(w/d) in [-127, 127]   int8  q [rows, cols],      d [rows, cols/32]
//   q4: d = amax/7,   q = RNE(w/d) in [-7, 7]       4-bit q [rows, cols/2] (element 2i in the
//       low nibble of byte i, two's complement), d [rows, cols/32]
// (Q8_0 / Q4_0-style blocks; the scale is fp32 rather than fp16.) The decoded weight is d·q in
// fp32. Routed experts are never re-encoded (they stay MXFP4).
//
// Q8 storage is tiled for the VNNI kernels (the layout is private to k3; QuantMatrix::q8 and
// ::scale read it): rows are padded to a multiple of 16 (padding q = 0, d = 0) and
//   q [rows/16][cols/32][8][16][4]: tile of 16 rows, block b, dword j, row-in-tile l, byte i
//       holds q of row 16·tile + l at column 32·b + e(4j + i), where e(p) is the "nibble order"
//       of kernel_table.h's Q8 activations (p < 16: element 2p; p >= 16: element 2(p-16)+1),
//   d [rows/16][cols/32][16]: the scale of row 16·tile + l, block b.
// So one 64-byte load is 4 inputs of 16 rows (vpdpbusd's operand), and activations quantized by
// the kernel table's quantize_q8 line up with it. Q4 keeps the row-major layout above.
//
// Kernels, by numerics mode (kernels/numerics.h; the execution context's):
// - int8 (Q8 only): the activations are quantized per 32-block like the MXFP4 int8 path (Q8_0:
//   s = amax/127, q = RNE(x/s); kernel_table.h quantize_q8) and every (row, token) is
//     acc = 0; for b = 0 .. cols/32-1: acc = fma(float(Σ_i q_w·q_x), d[r, b]·s[t, b], acc)
//   with the integer block sum exact (|Σ| < 2^24) and the fp32 product d·s rounded once:
//   kernel_table.h gemm_q8_q8 (AVX-512 VNNI vpdpbusd, AVX2 vpmaddubsw, scalar), the same bits on
//   every ISA and for any token count. Error vs the fp32-activation product: per block
//   |err| <= 0.5·s·Σ_i |d·q_w,i| (activation rounding) plus fp32 accumulation.
// - every other mode, and Q4: fp32 activations; ref::matmul_quant (scalar, fp64 accumulation
//   of d·q·x: the oracle) and quant_rows (AVX2+FMA — AVX-512 uses it too — or a scalar fp32
//   loop). Every (row, token) dot is computed the same way whatever the token count, so a row's
//   result does not depend on its batch.
// Both are threaded over tiles of 16 rows.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace k3 {

enum class QuantKind : uint8_t { Q8, Q4 };

/// A quantized trunk matrix (owns its bytes).
struct QuantMatrix {
  QuantKind kind = QuantKind::Q8;
  int64_t rows = 0, cols = 0;  ///< logical [rows, cols]; cols % 32 == 0
  std::vector<int8_t> q;       ///< Q8: rows16*cols, tiled (above); Q4: rows*cols/2 packed nibbles
  std::vector<float> d;        ///< Q8: rows16*cols/32, tiled; Q4: rows*cols/32 scales
  std::string name;            ///< tensor name (errors)
  uint64_t bytes() const { return q.size() + d.size() * sizeof(float); }
  /// Rows padded to the 16-row tile (Q8's storage).
  int64_t rows16() const { return (rows + 15) / 16 * 16; }
  /// Q8: the offset of (row r, column j) in q.
  int64_t q8_index(int64_t r, int64_t j) const {
    const int64_t e = j % 32, p = e % 2 == 0 ? e / 2 : 16 + e / 2;
    return (r / 16) * 16 * cols + ((j / 32) * 8 + p / 4) * 64 + (r % 16) * 4 + p % 4;
  }
  /// Q8: q of (row r, column j).
  int8_t q8(int64_t r, int64_t j) const { return q[static_cast<size_t>(q8_index(r, j))]; }
  /// The scale of (row r, block g) (either kind).
  float scale(int64_t r, int64_t g) const {
    if (kind == QuantKind::Q4) return d[static_cast<size_t>(r * (cols / 32) + g)];
    return d[static_cast<size_t>((r / 16) * 16 * (cols / 32) + g * 16 + r % 16)];
  }
};

/// Quantizes a BF16 or F32 2-D tensor `w` (cols % 32 == 0). Errors: k3::Error naming w.name when
/// it is not 2-D BF16/F32 with data, cols % 32 != 0, or holds NaN/Inf.
QuantMatrix quantize_matrix(const TensorView& w, QuantKind kind);

/// Y [T, rows] = X [T, cols] · Wᵀ on the quantized encoding (fp32 accumulation); Q8 under the
/// int8 numerics mode with int8 activations (above). y must not alias x. Errors: T < 0.
void matmul_quant(const QuantMatrix& w, const float* x, int64_t n_tokens, float* y);

/// The fp32-activation path whatever the numerics mode (benchmarks and tests compare it with
/// the int8 one). Errors: T < 0.
void matmul_quant_f32(const QuantMatrix& w, const float* x, int64_t n_tokens, float* y);
/// The int8-activation path whatever the numerics mode (Q8 only). Errors: k3::Error naming
/// w.name for a Q4 matrix, T < 0.
void matmul_quant_q8(const QuantMatrix& w, const float* x, int64_t n_tokens, float* y);

namespace ref {
/// The oracle: y = Σ (d·q in fp32) · x accumulated in fp64.
void matmul_quant(const QuantMatrix& w, const float* x, int64_t n_tokens, float* y);
}  // namespace ref

namespace detail {
/// Per-ISA row kernels: y[t * ldy + r] for rows [r0, r1) and all T tokens.
void quant_rows_scalar(const QuantMatrix& w, const float* x, int64_t T, float* y, int64_t ldy, int64_t r0, int64_t r1);
void quant_rows_avx2(const QuantMatrix& w, const float* x, int64_t T, float* y, int64_t ldy, int64_t r0, int64_t r1);
/// Per-ISA int8 kernels (kernel_table.h gemm_q8_q8): w Q8; xq [T, cols] int8 in nibble order,
/// xs [T, cols/32] activation scales, xsum [T, cols/32] Σ of each block's 32 xq; rows [r0, r1)
/// with r0 % 16 == 0.
void gemm_q8_q8_scalar(const QuantMatrix& w, const int8_t* xq, const float* xs, const int32_t* xsum, int64_t T,
                       float* y, int64_t ldy, int64_t r0, int64_t r1);
void gemm_q8_q8_avx2(const QuantMatrix& w, const int8_t* xq, const float* xs, const int32_t* xsum, int64_t T,
                     float* y, int64_t ldy, int64_t r0, int64_t r1);
void gemm_q8_q8_avx512(const QuantMatrix& w, const int8_t* xq, const float* xs, const int32_t* xsum, int64_t T,
                       float* y, int64_t ldy, int64_t r0, int64_t r1);
/// The two halves of gemm_q8_q8_avx512 (tests and benchmarks call them directly): the VNNI
/// kernel (vpdpbusd, every AVX-512 VNNI CPU) and the AMX-INT8 one (tdpbssd; only when
/// q8_amx_available()). gemm_q8_q8_avx512 takes AMX for T >= kAmxMinTokens.
void gemm_q8_q8_avx512_vnni(const QuantMatrix& w, const int8_t* xq, const float* xs, const int32_t* xsum, int64_t T,
                            float* y, int64_t ldy, int64_t r0, int64_t r1);
void gemm_q8_q8_amx(const QuantMatrix& w, const int8_t* xq, const float* xs, const int32_t* xsum, int64_t T, float* y,
                    int64_t ldy, int64_t r0, int64_t r1);
/// True when the CPU has AMX-TILE + AMX-INT8 and the OS granted the tile state (asked once).
bool q8_amx_available();
inline constexpr int64_t kAmxMinTokens = 2;
}  // namespace detail

}  // namespace k3
