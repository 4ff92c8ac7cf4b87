// Page-in: reads memory-mapped file bytes into RAM ahead of their first use (`k3 run/chat/serve
// --warm`), so the first forward pass does not stall on one page fault after another. The work
// is split into chunks read by several threads (faults in parallel keep a fast drive busy); each
// chunk asks mincore() which of its pages are resident and reads only the others, so a second
// page-in of a cached checkpoint costs a page-table walk. Pages are read with
// madvise(MADV_WILLNEED) (readahead of the whole run) then madvise(MADV_POPULATE_READ) (Linux
// 5.14+: fault the run in with one call); on older kernels, one byte is read per page.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>

#include "core/progress.h"

namespace k3 {

/// The step name page_in reports to its ProgressFn; its done/total are bytes.
inline constexpr std::string_view kPageInStep = "page-in";

struct PageInOptions {
  int threads = 16;                  ///< chunks read at once, >= 1
  uint64_t chunk_bytes = 64u << 20;  ///< bytes per chunk (the progress step), >= 1; rounded up to pages
};

struct PageInStats {
  uint64_t bytes = 0;           ///< bytes of the ranges, each widened to whole pages, overlaps merged
  uint64_t resident_bytes = 0;  ///< of `bytes`, resident before the call (mincore)
  uint64_t read_bytes = 0;      ///< of `bytes`, read by the call (bytes - resident_bytes)
  double seconds = 0;           ///< wall time of the call
};

/// Makes every page of `ranges` resident. Each range must lie inside a readable mapping (a
/// mapped file's bytes, an anonymous mapping); it is widened to the pages that hold it, which
/// stay inside the same mapping since mappings are whole pages. Nothing outside those pages is
/// touched. Empty ranges are ignored. `progress` (may be empty) is called with (kPageInStep,
/// bytes done, stats.bytes), one call at a time: 0 first, then after each chunk, non-decreasing,
/// the last with done == stats.bytes.
/// Errors (k3::Error): threads < 1 or chunk_bytes == 0 (naming the option and the value); a
/// range that is not mapped, or a read error of the file (naming the address range and errno's
/// text). A file truncated under its mapping raises SIGBUS, as any read of it would
/// (core/mapped_file.h).
PageInStats page_in(std::span<const std::span<const uint8_t>> ranges, const PageInOptions& options = {},
                    const ProgressFn& progress = {});

}  // namespace k3
