// k3::PrefillGrid (model/prefill_grid.h).
#include "model/prefill_grid.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace k3 {

PrefillGrid::PrefillGrid(int64_t prefill_chunk) : chunk_(prefill_chunk) {
  if (prefill_chunk < 1)
    throw Error("model options: prefill_chunk must be >= 1, found " + std::to_string(prefill_chunk));
}

int64_t PrefillGrid::piece_end(int64_t start, int64_t end, int64_t budget) const {
  const int64_t remaining = end - start;
  if (remaining <= budget) return end;
  return start + (std::max<int64_t>(budget, 0) / chunk_) * chunk_;
}

}  // namespace k3
