// ExpertStore: routed experts read from the checkpoint's shards on demand instead of
// through the mmap, so a checkpoint larger than RAM decodes at the speed of the drive.
//
// Layout (spec format: K3's shards hold tensors in lexicographic order, so the six tensors of one
// expert — w1/w2/w3 .weight_packed + .weight_scale — are adjacent in one shard). At open the store
// reads every shard header (pread), groups each expert's six byte ranges into contiguous runs
// (one run, so one pread, per expert on published checkpoints; more runs when a writer split or
// reordered them — layout() says how many) and reads each run aligned to 4 KiB into a 4 KiB-
// aligned buffer, with O_DIRECT where the file system accepts it (tmpfs does not: the store then
// falls back to buffered pread, per file, and io_mode() says which was used).
//
// Reads run on a pool of I/O threads (ExpertStoreOptions::io_threads reads in flight). acquire()
// pins a list of experts of one layer and queues the reads of those not resident (deduplicated:
// an expert appears once in the list the caller builds, and an expert already being read is not
// read twice); Lease::wait(i) blocks until expert i is readable, so the caller computes the
// experts already present while the others are still being read.
//
// Cache: experts stay resident after their lease ends while the resident bytes are within
// cache_bytes; beyond it the least recently used unpinned experts are freed (LRU). cache_bytes = 0
// keeps nothing: an expert's buffer lives only while a lease pins it (then the transient memory is
// one layer's selected experts). Pinned experts are never evicted, so the resident bytes may
// exceed the budget by at most the experts of the calls in progress. A freed expert's buffer is
// kept for reuse (at most 16 buffers, outside the budget): a new buffer's pages are zeroed by
// the kernel on the first read into them, CPU time a reused buffer does not cost.
//
// Prefetch: prefetch(layer, ids) pins a predicted list of experts of a layer (the model predicts
// the next MoE layer's experts while the current layer computes, model/latent_moe.h
// predict_moe_experts) and queues the reads of those not resident at low priority: the I/O
// threads take every queued acquire() read first, and an acquire() of an expert still waiting in
// the prefetch queue moves it to the front. Both queues are filled in file-offset order (shard,
// then offset). The prediction stands until the next acquire() of that layer, which counts how
// many acquired experts it named (stats().predicted_right of predicted) and then drops its pins:
// an expert the prediction named but the layer did not use is freed (with no cache) or kept as
// an LRU entry; one whose read had not begun is dropped unread (prefetch_cancelled); one read
// and freed without ever being acquired is a wasted read (prefetch_wasted, _bytes). Prefetch
// only changes when bytes arrive, never which bytes a computation reads: results are
// bit-identical with it on or off.
//
// Thread safety: acquire / prefetch / Lease::wait / stats may be called from any thread. Every Lease must
// end before its store is destroyed.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/checkpoint.h"

namespace k3 {

struct ExpertStoreOptions {
  uint64_t cache_bytes = 0;  ///< byte budget of resident unpinned experts (0 = no cache)
  int io_threads = 16;       ///< reads in flight, >= 1 (K3 selects 16 experts per token)
  bool direct = true;        ///< try O_DIRECT (falls back to buffered per file when refused)
  /// The model predicts the next MoE layer's experts and calls prefetch() (model/k3_model.cpp);
  /// false: prefetch() does nothing, every read is queued by acquire() (k3 --prefetch-experts off).
  bool prefetch = true;
};

/// Counters since open (or the last reset_stats()). Bytes are those requested from the drive
/// (aligned runs, so up to 8 KiB per run above the experts' own bytes).
struct ExpertStoreStats {
  uint64_t hits = 0;    ///< acquired experts already resident or being read
  uint64_t misses = 0;  ///< acquired experts that needed a read
  uint64_t reads = 0;   ///< pread calls that returned data
  uint64_t bytes_read = 0;
  uint64_t evictions = 0;
  uint64_t resident_bytes = 0;  ///< now (pinned + cached)
  double read_seconds = 0;      ///< sum over I/O threads of time spent inside pread
  double wait_seconds = 0;      ///< time callers spent blocked in Lease::wait
  double busy_seconds = 0;      ///< wall time with at least one read in flight (the drive busy)
  // Prefetch (see ExpertStore::prefetch). hits counts an acquired expert that a prefetch read
  // (or is reading) as a hit; hits - prefetch_used are the cache's own hits.
  uint64_t prefetched = 0;             ///< experts whose read prefetch() queued
  uint64_t prefetch_used = 0;          ///< of those, later acquired (the read was useful)
  uint64_t prefetch_wasted = 0;        ///< of those, read and freed without being acquired
  uint64_t prefetch_wasted_bytes = 0;  ///< the bytes of those wasted reads (aligned runs)
  uint64_t prefetch_cancelled = 0;     ///< of those, dropped before their read began (no bytes)
  uint64_t predicted = 0;        ///< experts acquired by a layer that had a standing prediction
  uint64_t predicted_right = 0;  ///< of those, experts the prediction named
};

/// The three matrices of one routed expert, pointing into a store buffer (valid while pinned).
struct ExpertMatrices {
  Mxfp4Matrix w1, w2, w3;  ///< w1/w3 [Im, L], w2 [L, Im] (spec §3.6)
};

class ExpertStore {
 public:
  /// Builds the expert layout from `ck` (which must outlive the store; it may be opened with or
  /// without map_data) and starts the I/O threads. Each expert's six tensors are named and sized
  /// by the tensor table (io/tensor_table.h, roles ExpertW1/W2/W3 and their stored MXFP4 pairs).
  /// Errors (k3::Error): io_threads < 1, a shard that cannot be opened (names the file), an
  /// expert tensor missing or not the table's U8 [rows, cols/2] / [rows, cols/32].
  ExpertStore(const Checkpoint& ck, const ExpertStoreOptions& options);
  ~ExpertStore();
  ExpertStore(const ExpertStore&) = delete;
  ExpertStore& operator=(const ExpertStore&) = delete;

  class Lease;
  /// Pins experts `ids` (each in [0, num_experts), no repeats) of MoE layer `layer` and queues
  /// the reads of those not resident, in list order. Errors: k3::Error on a layer that is not a
  /// LatentMoE layer, an id out of range or repeated. Read errors surface in Lease::wait.
  Lease acquire(int layer, std::span<const int64_t> ids);

  /// The prediction for MoE layer `layer`: pins experts `ids` (each in [0, num_experts), no
  /// repeats) until the next acquire() of `layer` (or the next prefetch() of it, which replaces
  /// it) and queues the reads of those not resident at low priority, in file-offset order. Does
  /// nothing when options().prefetch is false. Pinned predictions may take the resident bytes
  /// above cache_bytes by their experts. Errors: as acquire() (k3::Error on a layer that is not a
  /// LatentMoE layer, an id out of range or repeated; nothing is pinned then).
  void prefetch(int layer, std::span<const int64_t> ids);

  /// "O_DIRECT" when every shard read so far used it, "buffered" when none did, else "mixed".
  std::string io_mode() const;
  /// Bytes one expert of `layer` occupies in the shard (its six tensors).
  uint64_t expert_bytes(int layer, int64_t e) const;
  /// Total bytes of every routed expert of the checkpoint.
  uint64_t total_expert_bytes() const;
  /// Layout found at open: experts and the pread runs they need (== experts when each expert's
  /// tensors are contiguous).
  struct Layout {
    int64_t experts = 0;
    int64_t runs = 0;
  };
  Layout layout() const;
  const ExpertStoreOptions& options() const;
  ExpertStoreStats stats() const;
  void reset_stats();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// Experts pinned by one acquire(); unpins them on destruction. Move-only.
class ExpertStore::Lease {
 public:
  Lease() = default;
  Lease(Lease&&) noexcept;
  Lease& operator=(Lease&&) noexcept;
  ~Lease();
  size_t size() const { return entries_.size(); }
  /// True when expert i (index in the acquired list) is readable now (never blocks).
  bool ready(size_t i) const;
  /// Blocks until expert i is read; returns its matrices. Errors: k3::Error naming the shard,
  /// the expert and the byte range when its read failed (a truncated or unreadable file).
  const ExpertMatrices& wait(size_t i) const;

 private:
  friend class ExpertStore;
  Impl* store_ = nullptr;
  std::vector<void*> entries_;  // ExpertStore::Impl entries (opaque here)
  void release();
};

}  // namespace k3
