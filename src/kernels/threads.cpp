#include "kernels/threads.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <optional>

#include "kernels/exec_config.h"

namespace k3 {

namespace {
std::atomic<int> g_threads{0};
}

void set_num_threads(int n) { g_threads.store(n > 0 ? n : omp_get_num_procs()); }

int num_threads() {
  if (const ExecContext* c = detail::tl_exec_context; c != nullptr && c->threads > 0) return c->threads;
  int n = g_threads.load();
  if (n <= 0) {
    n = std::max(1, omp_get_max_threads());
    g_threads.store(n);
  }
  return n;
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t units = (n + grain - 1) / grain;
  const int nt = static_cast<int>(std::min<int64_t>(num_threads(), units));
  if (nt <= 1 || omp_in_parallel()) {  // nested calls run inline on the caller's thread
    fn(0, n);
    return;
  }
  // Dynamic chunks (about 8 per worker): on a shared machine a descheduled worker's share is taken
  // over by the others instead of stalling the whole region. Chunks are grain-aligned; which
  // worker runs a chunk does not change any result (outputs of different chunks are disjoint).
  const int64_t chunk = std::max<int64_t>(1, units / (8 * static_cast<int64_t>(nt))) * grain;
  std::atomic<int64_t> next{0};
  std::exception_ptr err;
  std::mutex mu;
  const ExecContext* ctx = detail::tl_exec_context;  // the workers run the caller's context
#pragma omp parallel num_threads(nt)
  {
    std::optional<ExecScope> scope;
    if (ctx != nullptr) scope.emplace(*ctx);
    for (;;) {
      const int64_t b = next.fetch_add(chunk, std::memory_order_relaxed);
      if (b >= n) break;
      const int64_t e = std::min(n, b + chunk);
      try {
        fn(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu);
        if (!err) err = std::current_exception();
        next.store(n, std::memory_order_relaxed);  // stop handing out work
      }
    }
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace k3
