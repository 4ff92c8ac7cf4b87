// Scalar reference kernels (the oracle): dense linear maps y = W·x over weights stored in the
// checkpoint, decoded to fp32 element by element inside the loop. Accumulation is in fp64 so the
// oracle's own rounding stays far below any tolerance a faster kernel is tested with.
//
// Conventions: a Linear weight W is [out, in] row-major (PyTorch), y[r] = Σ_c W[r][c]·x[c].
// Activations are fp32. Shapes are outermost first.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace k3::ref {

/// y[r] = Σ_c W[r][c]·x[c] for every row r of a 2-D BF16 or F32 weight W [out, in].
/// x: [in] fp32, y: [out] fp32 (must not alias x).
/// Throws k3::Error naming W.name when W is not 2-D or its dtype is neither BF16 nor F32.
void matvec(const TensorView& w, const float* x, float* y);

/// Same over the row range [row_begin, row_begin + n_rows): y[i] = Σ_c W[row_begin+i][c]·x[c].
/// y: [n_rows]. Throws k3::Error when the range lies outside W.
void matvec_rows(const TensorView& w, int64_t row_begin, int64_t n_rows, const float* x, float* y);

/// Transposed product over a row range: y[c] = Σ_i W[row_begin+i][c]·x[i] (c over all `in`
/// columns). x: [n_rows], y: [in]. Used by MLA's absorbed decode (q_abs = W_kbᵀ q_nope).
void matvec_t_rows(const TensorView& w, int64_t row_begin, int64_t n_rows, const float* x, float* y);

/// Y[t] = W·X[t] for t in [0, n_tokens): X [n_tokens, in], Y [n_tokens, out], fp32 row-major.
void matmul(const TensorView& w, const float* x, int64_t n_tokens, float* y);

/// One row of W decoded to fp32: out[c] = W[row][c], out: [in].
void decode_row(const TensorView& w, int64_t row, float* out);

}  // namespace k3::ref
