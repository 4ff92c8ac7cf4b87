// Trunk quantization at load (`--trunk-type q8|q4`): a BF16 weight W [rows, cols] is
// re-encoded once into groups of 32 consecutive inputs of one row with one fp32 scale each,
// symmetric (no zero point), and the trunk's GEMV/GEMM then read the smaller encoding:
//   q8: d = amax/127, q = RNE(w/d) in [-127, 127]   int8  q [rows, cols],      d [rows, cols/32]
//   q4: d = amax/7,   q = RNE(w/d) in [-7, 7]       4-bit q [rows, cols/2] (element 2i in the
//       low nibble of byte i, two's complement), d [rows, cols/32]
// (Q8_0 / Q4_0-style blocks; the scale is fp32 rather than fp16.) The decoded weight is d·q in
// fp32. Routed experts are never re-encoded (they stay MXFP4).
//
// Kernels: ref::matmul_quant (scalar, fp64 accumulation of d·q·x: the oracle) and matmul_quant
// (the execution context's kernel table, quant_rows: AVX2+FMA — AVX-512 uses it too — or a scalar fp32 loop;
// threaded over rows). Every (row, token) dot is computed the same way whatever the token count,
// so a row's result does not depend on its batch.
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
  std::vector<int8_t> q;       ///< Q8: rows*cols; Q4: rows*cols/2 packed nibbles
  std::vector<float> d;        ///< rows*cols/32 scales
  std::string name;            ///< tensor name (errors)
  uint64_t bytes() const { return q.size() + d.size() * sizeof(float); }
};

/// Quantizes a BF16 or F32 2-D tensor `w` (cols % 32 == 0). Errors: k3::Error naming w.name when
/// it is not 2-D BF16/F32 with data, cols % 32 != 0, or holds NaN/Inf.
QuantMatrix quantize_matrix(const TensorView& w, QuantKind kind);

/// Y [T, rows] = X [T, cols] · Wᵀ on the quantized encoding (fp32 accumulation). y must not
/// alias x. Errors: T < 0.
void matmul_quant(const QuantMatrix& w, const float* x, int64_t n_tokens, float* y);

namespace ref {
/// The oracle: y = Σ (d·q in fp32) · x accumulated in fp64.
void matmul_quant(const QuantMatrix& w, const float* x, int64_t n_tokens, float* y);
}  // namespace ref

namespace detail {
/// Per-ISA row kernels: y[t * ldy + r] for rows [r0, r1) and all T tokens.
void quant_rows_scalar(const QuantMatrix& w, const float* x, int64_t T, float* y, int64_t ldy, int64_t r0, int64_t r1);
void quant_rows_avx2(const QuantMatrix& w, const float* x, int64_t T, float* y, int64_t ldy, int64_t r0, int64_t r1);
}  // namespace detail

}  // namespace k3
