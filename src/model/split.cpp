#include "model/split.h"

#include <algorithm>
#include <vector>

#include "kernels/ops.h"
#include "kernels/ref/linear.h"
#include "model/buffer.h"

namespace k3 {

void allgather_columns(Comm& comm, const float* mine, int64_t T, const int64_t* widths, float* out) {
  const int n = comm.size();
  int64_t total = 0;
  std::vector<int64_t> counts(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) {
    counts[q] = T * widths[q] * static_cast<int64_t>(sizeof(float));
    total += widths[q];
  }
  FBuf got(static_cast<size_t>(T * total));
  comm.allgatherv(mine, counts, got.data());
  const float* src = got.data();
  int64_t c0 = 0;
  for (int q = 0; q < n; ++q) {
    for (int64_t t = 0; t < T; ++t, src += widths[q]) std::copy_n(src, widths[q], out + t * total + c0);
    c0 += widths[q];
  }
}

void split_output_rows(Comm& comm, const float* mine, int64_t T, int64_t n_items, int64_t per_item, int64_t unit,
                       const TensorView& rows, int64_t D, bool fast, float* out) {
  const int n = comm.size();
  std::vector<int64_t> widths(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) widths[q] = split_range_units(n_items, n, q, unit).size() * per_item;
  FBuf all(static_cast<size_t>(T * n_items * per_item));
  allgather_columns(comm, mine, T, widths.data(), all.data());
  const int64_t Dr = rows.shape[0];
  FBuf part(static_cast<size_t>(T * Dr));
  if (Dr > 0) {
    if (fast) k3::matmul(rows, all.data(), T, part.data());
    else ref::matmul(rows, all.data(), T, part.data());
  }
  for (int q = 0; q < n; ++q) widths[q] = split_range_units(D, n, q, kSplitRowUnit).size();
  allgather_columns(comm, part.data(), T, widths.data(), out);
}

}  // namespace k3
