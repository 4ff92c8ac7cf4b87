// Drive read probe: what the drive delivers for the expert streaming's access pattern —
// records of one expert's size (17.55 MB on K3), read with O_DIRECT into aligned buffers,
// sequentially or at random aligned offsets, with several reads in flight. The figure
// bench/expert_stream and `k3 info --plan --probe` compare streaming with.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace k3 {

struct DriveProbeOptions {
  uint64_t record_bytes = 17'547'264;  ///< K3 expert: 3 x 3072 x 3584 x 17/32 bytes
  int64_t records = 64;                ///< reads per pattern
  int in_flight = 16;                  ///< reader threads (reads in flight)
  bool random = false;                 ///< false: consecutive records; true: uniform random offsets
  bool direct = true;                  ///< O_DIRECT (falls back to buffered where refused)
  uint64_t seed = 1;
};

struct DriveProbeResult {
  double gbs = 0;  ///< bytes / wall seconds (1e9 bytes per second)
  uint64_t bytes = 0;
  double seconds = 0;
  bool direct = false;  ///< every read used O_DIRECT
  int64_t records = 0;
};

/// Reads `records` records spread over `files` (the checkpoint's shards; each must hold at
/// least one record — smaller files are skipped) and times them. Sequential: consecutive records
/// from the start of each file in turn; random: a file and an aligned offset drawn per record.
/// Errors: k3::Error naming the file when it cannot be opened or read, when no file is large
/// enough, or options out of range (record_bytes == 0, records < 1, in_flight < 1).
DriveProbeResult probe_drive(const std::vector<std::string>& files, const DriveProbeOptions& o);

/// Drops the page cache (echo 3 > /proc/sys/vm/drop_caches, after sync). Returns false (and
/// changes nothing) when not permitted, e.g. not root or in a container.
bool drop_page_cache();

}  // namespace k3
