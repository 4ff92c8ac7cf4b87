// The exchange of the split layers (tensor parallel, docs/distributed.md): gather the inputs of an
// output projection, compute this rank's block of its output rows with the full K reduction, gather
// the blocks. No float sum crosses ranks, so each output element is the bits one process computes.
#pragma once
#include <cstdint>

#include "core/comm.h"
#include "core/tensor.h"

namespace k3 {

/// Rows per unit of the output-row and intermediate-column splits (split_range_units). The GEMMs
/// give a row the same bits in any row block (tests/kernels/test_ops_split.cpp), but the SiTU
/// activation (kernels/ops.h glu_activation) runs an 8-wide vector body and a scalar libm tail
/// whose last bits differ: with every rank's column block a multiple of 16 but the last, each
/// activation lands in the body or the tail as in one process.
inline constexpr int64_t kSplitRowUnit = 16;

/// All-gather of column blocks: this rank's `mine` [T, widths[rank]] fp32 joins the others' into
/// out [T, Σ widths], rank r's columns at Σ_{q<r} widths[q]. widths: [comm.size()], the same on
/// every rank. Every rank calls it (a zero width still takes part). Errors: the communicator's.
void allgather_columns(Comm& comm, const float* mine, int64_t T, const int64_t* widths, float* out);

/// The output side of a split layer: this rank's piece `mine` [T, split_range_units(n_items,
/// ranks, rank, unit).size()·per_item] (its heads' outputs, its intermediate columns'
/// activations) is gathered in item order into [T, n_items·per_item]; `rows` (this rank's rows
/// split_range_units(D, ranks, rank, kSplitRowUnit) of the output projection, BF16 or quantized,
/// [D_r, n_items·per_item]) multiplies it ([T, D_r], k3::matmul, or the fp64 ref::matmul when
/// !fast); the blocks are gathered into out [T, D]. Two collectives on every rank.
void split_output_rows(Comm& comm, const float* mine, int64_t T, int64_t n_items, int64_t per_item, int64_t unit,
                       const TensorView& rows, int64_t D, bool fast, float* out);

}  // namespace k3
