// Activation encodings of the 'mxfp8' and 'bf16' numerics modes (numerics.h), written as bf16
// bit patterns for the pair-chain GEMMs (kernel_table.h gemm_bf16_dp / gemm_mxfp4_dp).
// Portable C++ (the compiler vectorizes the element loops); O(T·K), against the GEMMs' O(T·K·N).
#pragma once
#include <cstdint>

namespace k3 {

/// MXFP8 (E4M3 elements, E8M0 scale per 32) fake-quantization of x [n] (n % 32 == 0), written
/// as the bf16 bits of the decoded values s·q (exact: q has 4 significant bits), spec
/// algorithms.md §5.2: amax per block; shared_exp = floor(log2 amax) − 8 clamped to [−127, 127];
/// q = RNE(x / 2^shared_exp) on the E4M3 grid (subnormal step 2^−9), saturated to ±448. A block
/// whose amax is 0 is all zeros; a block holding NaN/Inf becomes all NaN (the results are NaN,
/// never silently wrong). Error per element: |x − s·q| <= 2^−4·|x| for |q| >= 2^−6, else
/// <= 2^−10·s; a value above 448·s (only the block maximum can be) loses up to 12.5%.
void quantize_mxfp8_bf16(const float* x, int64_t n, uint16_t* out);

/// out[i] = bf16 RNE of x[i] (NaN stays NaN), i < n; out[n] = 0 when n is odd (pad of the pair).
void round_bf16_row(const float* x, int64_t n, uint16_t* out);

}  // namespace k3
