// Scalar reference kernels for MXFP4 weights (compressed-tensors "mxfp4-pack-quantized",
// spec k3-architecture.md §4, algorithms.md §5.1): weights are decoded to fp32 exactly inside the
// loop (E2M1 value × 2^(e−127)); accumulation in fp64.
#pragma once
#include <cstdint>
#include <string_view>

#include "core/tensor.h"

namespace k3::ref {

/// Decodes one packed byte with its group's E8M0 scale byte:
/// even = E2M1(low nibble)·2^(scale−127) (column 2j), odd = E2M1(high nibble)·2^(scale−127)
/// (column 2j+1). Throws k3::Error when scale == 0xFF (E8M0 NaN, refused).
/// Example: byte 0x72, scale 128 -> (2.0, 12.0); byte 0xF9, scale 127 -> (−0.5, −6.0).
void mxfp4_decode_byte(uint8_t byte, uint8_t scale, float* even, float* odd);

/// Decodes row `row` of W [rows, cols] into out [cols] (fp32, exact).
/// Throws k3::Error (naming `what`, the row and group) on a 0xFF scale, a row out of range, or
/// cols not a multiple of 32.
void mxfp4_decode_row(const Mxfp4Matrix& w, int64_t row, float* out, std::string_view what = "mxfp4");

/// y[r] = Σ_c W[r][c]·x[c]; x: [cols] fp32, y: [rows] fp32 (must not alias x).
/// Throws k3::Error (naming `what`) on a 0xFF scale byte or inconsistent dimensions.
void matvec_mxfp4(const Mxfp4Matrix& w, const float* x, float* y, std::string_view what = "mxfp4");

}  // namespace k3::ref
