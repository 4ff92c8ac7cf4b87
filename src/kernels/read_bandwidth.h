// Built-in streaming read-bandwidth probe: the machine's practical DRAM read limit that decode
// speed is compared with (issue #6, `k3 bench`, bench/bandwidth.cpp).
#pragma once
#include <cstdint>
#include <vector>

namespace k3 {

struct ReadBandwidth {
  double median_gbs = 0;        ///< median over runs, GB/s (1e9 bytes per second)
  double best_gbs = 0;          ///< fastest run
  uint64_t bytes = 0;           ///< buffer size read per run
  int threads = 0;              ///< workers used (num_threads())
  std::vector<double> run_gbs;  ///< every run
};

/// Allocates `bytes` (rounded down to a multiple of 4 KiB, at least 64 MiB; default 1 GiB),
/// first-touches it from the worker threads, then `runs` times sums it with every worker
/// (dynamic contiguous chunks read with the dispatched read_sum kernel, 4 vector accumulators)
/// and reports GB/s. Errors: k3::Error when runs < 1 or the allocation fails.
ReadBandwidth measure_read_bandwidth(uint64_t bytes = 1ull << 30, int runs = 7);

}  // namespace k3
