// Streaming read-bandwidth probe: the machine's practical DRAM read limit that decode speed is
// compared with (`k3 bench`, bench/bandwidth.cpp, docs/performance.md "Roofline and decode at
// K3 widths").
//
// What one probe measures: `passes` timed reads of a buffer far larger than the last-level
// cache (default 1 GiB), every byte read once per pass with the dispatched read_sum kernel
// (integer adds of 64-bit words, 8 vector loads in flight per step, a software prefetch ahead;
// by default in 2 MiB pages: the fastest reads this machine does, the yardstick), split over
// num_threads() workers in 4 MiB chunks taken dynamically (the same scheduling as decode's
// parallel_for). Every page is touched before the first timed pass and one untimed pass runs
// first, so timed passes pay no page faults (counted: timed_page_faults) and no first TLB fill.
// GB/s are 1e9 bytes per second of wall time; the median pass is the figure, the spread tells
// how much the machine moved under it, cpu_share whether workers were descheduled.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace k3 {

struct ReadBandwidth {
  double median_gbs = 0;          ///< median over timed passes, GB/s (1e9 bytes per second)
  double best_gbs = 0;            ///< fastest pass
  double worst_gbs = 0;           ///< slowest pass
  double spread = 0;              ///< (3rd quartile − 1st quartile) / median of the passes
  double cpu_share = 0;           ///< process CPU time / (wall time × threads) over timed passes;
                                  ///< well below 1: workers were descheduled (a busy machine)
  int64_t timed_page_faults = 0;  ///< minor + major page faults during timed passes (expect 0)
  uint64_t bytes = 0;             ///< bytes read per pass
  int threads = 0;                ///< workers used (num_threads())
  bool huge_pages = false;        ///< buffer madvise'd MADV_HUGEPAGE (2 MiB transparent huge pages)
  bool pinned = false;            ///< workers pinned to one CPU each during the probe
  std::vector<double> run_gbs;    ///< every timed pass, in order
};

struct ReadProbeOptions {
  uint64_t bytes = 1ull << 30;  ///< buffer (rounded down to 2 MiB, at least 64 MiB)
  int passes = 9;               ///< timed passes (>= 1), after one untimed warm-up pass
  /// Transparent huge pages for the buffer (madvise; the kernel may still give 4 KiB pages).
  /// Default on: the machine's best read (one core reads 2 MiB pages faster than 4 KiB ones),
  /// what decode reaches with `--trunk-memory copy`; off: 4 KiB pages, as a mapped file's.
  bool huge_pages = true;
  bool pin_threads = false;  ///< pin worker i to CPU i (mod CPUs) during the probe, then restore
};

/// The anonymous-buffer probe (see the header comment). Errors: k3::Error when passes < 1 or
/// the buffer cannot be allocated.
ReadBandwidth measure_read_bandwidth(const ReadProbeOptions& o);
/// Shorthand: a 2 MiB-page buffer of `bytes`, `runs` timed passes.
ReadBandwidth measure_read_bandwidth(uint64_t bytes = 1ull << 30, int runs = 7);

/// One readable memory range (e.g. the mapped bytes of one tensor).
struct MemRegion {
  const void* data = nullptr;
  uint64_t bytes = 0;
};

/// The same read over memory that already exists, e.g. a model's mapped weights, which decode
/// reads: the regions are read in order (4 MiB chunks, dynamic over the workers), `passes` times
/// (after one untimed pass when `warm_up`). bytes = Σ region bytes read (each region's bytes
/// before its first and after its last 8-byte boundary, < 8 each, are skipped). Errors: k3::Error when passes < 1, a region is null with bytes > 0, or
/// the regions hold less than 1 MiB.
ReadBandwidth measure_region_read_bandwidth(std::span<const MemRegion> regions, int passes = 5, bool warm_up = true,
                                            bool pin_threads = false);

}  // namespace k3
