// Thread count and a static row-range parallel-for (OpenMP underneath). The count is the calling
// thread's execution context's (exec_config.h: ExecConfig::threads, per model) when it sets one,
// else process-wide (set_num_threads; `k3 ... -t N` sets both); kernels split output rows /
// heads / experts with parallel_for, whose workers run under the caller's execution context.
#pragma once
#include <cstdint>
#include <functional>

namespace k3 {

/// Sets the worker count for parallel_for; n <= 0 means "all hardware threads".
void set_num_threads(int n);
/// Current worker count (>= 1): the installed execution context's threads when > 0, else the
/// process count (default: all hardware threads, or OMP_NUM_THREADS).
int num_threads();

/// Splits [0, n) into contiguous chunks whose boundaries are multiples of `grain` (except the
/// end) and calls fn(begin, end) once per chunk on up to num_threads() workers, which take chunks
/// dynamically (about 8 per worker). fn must write disjoint outputs per chunk; results then do not
/// depend on the thread count. Runs inline (one call fn(0, n)) with one thread, when n <= grain,
/// or when already inside a parallel region. Exceptions thrown by fn are rethrown (the first).
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

/// Minimum work (multiply-adds, or comparable element operations) worth one scheduling unit:
/// below it, waking a second thread costs more than it saves (small models such as K3-mini
/// otherwise spend their decode time in OpenMP barriers).
inline constexpr int64_t kMinParallelWork = int64_t{1} << 18;

/// Grain for parallel_for over items that each cost `work_per_item`: the smallest multiple of
/// `grain` whose chunk holds at least kMinParallelWork work, so small problems run inline.
inline int64_t grain_for_work(int64_t grain, int64_t work_per_item) {
  if (grain < 1) grain = 1;
  if (work_per_item < 1) work_per_item = 1;
  const int64_t items = (kMinParallelWork + work_per_item - 1) / work_per_item;
  return ((items + grain - 1) / grain) * grain;
}

}  // namespace k3
