// k3::Comm — the communicator of a group of ranks that run one model together (spec
// distributed.md §4.2, §7.1). The engine moves data between ranks only through this interface
// and adds floats on the CPU in its own fixed order, never inside the transport, so a
// distributed forward pass is bit-identical to one process. Two implementations: the size-1
// communicator below (one process: every collective is a copy) and the MPI one
// (core/comm_mpi.h, built with K3_MPI).
//
// Every rank of the group must call the same collectives in the same order with the same
// per-rank sizes; a rank whose share is empty still calls them with zero bytes.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace k3 {

/// Traffic of one communicator since construction or the last reset_counters(): calls of
/// collectives and bytes this rank sent to and received from other ranks (its own piece
/// is neither sent nor received).
struct CommCounters {
  uint64_t collectives = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  /// Wall seconds inside the transport's calls (0 for the size-1 communicator): waiting for the
  /// slowest rank included, so it is the time a rank is not computing.
  double seconds = 0;
};

class Comm {
 public:
  virtual ~Comm() = default;
  /// This process's rank in [0, size()).
  virtual int rank() const = 0;
  /// Ranks in the group (>= 1).
  virtual int size() const = 0;
  /// All-gather of variable-size byte pieces. `counts` [size()] holds every rank's piece size in
  /// bytes (the same values on every rank); this rank's piece is `mine` (counts[rank()] bytes;
  /// may be null when that is 0). `out` receives the pieces concatenated in rank order
  /// (Σ counts bytes; it may not overlap `mine` unless `mine` already sits at its own offset
  /// in `out`, which then is left as it is). Errors: k3::Error naming the rank and the call
  /// (a negative count, counts.size() != size(), a transport error).
  virtual void allgatherv(const void* mine, std::span<const int64_t> counts, void* out) = 0;
  /// Copies `bytes` bytes at `data` from rank `root` to every rank. Errors as allgatherv.
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  /// Ends the whole group at once, with exit status `code` on every rank, without waiting for
  /// the other ranks (one rank's error must not leave the others blocked in a collective).
  /// The size-1 communicator exits the process.
  [[noreturn]] virtual void abort(int code) = 0;
  /// The transport, e.g. "single process" or "MPI (Open MPI v4.1.4)".
  virtual std::string transport() const = 0;

  const CommCounters& counters() const { return counters_; }
  void reset_counters() { counters_ = {}; }

 protected:
  /// Checks an allgatherv's arguments (throws k3::Error naming the rank) and counts its traffic.
  /// Returns Σ counts.
  int64_t account_allgatherv(std::span<const int64_t> counts);
  /// Counts a broadcast of `bytes` from `root`.
  void account_broadcast(int64_t bytes, int root);
  CommCounters counters_;
};

/// The communicator of one process (rank 0 of 1): allgatherv copies this rank's piece,
/// broadcast does nothing; the counters still count calls (bytes stay 0).
class SingleProcessComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allgatherv(const void* mine, std::span<const int64_t> counts, void* out) override;
  void broadcast(void* data, int64_t bytes, int root) override;
  [[noreturn]] void abort(int code) override;
  std::string transport() const override { return "single process"; }
};

/// Rank `r`'s block of `n` items split over `ranks` ranks in contiguous blocks, the first
/// n % ranks ranks holding one more (6 items on 4 ranks: [0,2) [2,4) [4,5) [5,6); 3 on 4: the
/// last rank holds none). Returns [begin, end). Errors: k3::Error when n < 0, ranks < 1 or r
/// outside [0, ranks).
struct IndexRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool contains(int64_t i) const { return i >= begin && i < end; }
};
IndexRange split_range(int64_t n, int ranks, int r);
/// split_range over whole units of `unit` items (the last unit may be short): rank r's block
/// starts at a multiple of `unit` (64 items, unit 16, 3 ranks: [0,32) [32,48) [48,64)). The
/// output-row split of the GEMMs uses unit 16, the kernels' row panel, so a rank's rows fall in
/// the panels one process computes them in. Errors: as split_range, and unit < 1.
IndexRange split_range_units(int64_t n, int ranks, int r, int64_t unit);
/// The rank whose split_range block holds item i (i in [0, n)).
int split_owner(int64_t n, int ranks, int64_t i);

}  // namespace k3
