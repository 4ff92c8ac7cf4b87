// k3::PrefixCache — K3's hybrid prefix cache (spec algorithms.md §6): reuse of the computed
// state of a prompt prefix across requests and turns.
//
// A prompt is cut into blocks of B token ids (block_tokens). Block b's key chains the previous
// block's key, the model fingerprint and its B ids (vLLM's block hash), so a key names a whole
// prefix; the ids are stored too and compared on every hit (no wrong answer on a collision).
// Block 0's parent is the fingerprint hash salted with the request's partition (0 = shared), so
// that clients in different partitions never reuse (nor time) each other's blocks.
// Each cached block holds, for every MLA layer, the B latent rows it appended
// ([n_mla_layers, B, kv_lora_rank + rope_dim] fp32). KDA layers keep one recurrent state per
// sequence, which can only be resumed where it was copied, so some block ends also hold a KDA
// snapshot: every KDA layer's recurrent state S and conv window (fp32, layout of
// model/sequence_state.h). Snapshot policy (snapshot_points): every `snapshot_every`-th block
// boundary — by default the smallest interval whose MLA bytes are at least one snapshot's
// bytes, K3's page unification of §6.2 (6144 tokens on the real K3) — plus each prompt's replay
// boundary floor((n−1)/B)·B, where the next turn of a conversation resumes.
//
// lookup() returns the longest cached prefix, shorter than the prompt, that ends at a KDA
// snapshot and has all its MLA blocks: the state there is rebuilt (MLA rows concatenated, KDA
// state copied) and prefill resumes at that token. The resume point is a multiple of 64, so the
// KDA chunks stay on the one-pass grid, the GEMMs are batch-invariant, and a resume never leaves
// a lone last id where the one-pass prefill has a longer piece: logits and states are
// bit-identical to recomputation for every block size (tests/runtime/test_prefix_cache.cpp
// checks B = 64 and 128 with prefill chunks of 64 and 128).
//
// Memory: blocks are charged to a RAM budget; a block a running sequence uses is pinned (a Pin
// holds reference counts); unpinned blocks without cached children are evicted least recently
// used first (the leaf-most first, so what stays is always a usable prefix). With a disk tier
// (disk_dir), evicted blocks — and every block at destruction — are written there as one file
// each (prefix_cache_disk.h) with a CRC-32 and the fingerprint; a lookup that misses in RAM reads
// them back, so the cache survives a restart. Thread-safe (one mutex).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/k3_model.h"

namespace k3 {

/// An image of a prompt as the prefix cache keys it: ids [pos, pos + n) are its media pads and
/// `digest` names its content (runtime/image_prompt.h image_digest: SHA-256 of its patches).
struct MediaKey {
  int64_t pos = 0;
  int64_t n = 0;
  uint64_t digest = 0;
};

class PrefixCacheDisk;

struct PrefixCacheOptions {
  /// Tokens per block, a multiple of 64 (the KDA chunk; k3::Error otherwise). 64 by default:
  /// a turn recomputes on average B/2 ids of the previous prompt (docs/performance.md).
  int64_t block_tokens = 64;
  /// KDA snapshot interval in blocks (>= 1); 0 = auto: ceil(snapshot bytes / MLA bytes of one
  /// block), so snapshots take at most about as much memory as the MLA blocks between them.
  int64_t snapshot_every = 0;
  uint64_t ram_bytes = 512ull << 20;  ///< RAM budget of the cached blocks (bytes); 0 = cache off
  std::filesystem::path disk_dir;     ///< second tier; empty = none
  uint64_t disk_bytes = 4ull << 30;   ///< disk budget (bytes) when disk_dir is set
  /// Where the disk tier reports a refused file or a failed write (one line each, counted in
  /// PrefixCacheStats::disk_rejected / disk_write_failures); empty: stderr.
  std::function<void(const std::string& line)> log;
};

/// Counters and gauges (for /metrics and the stats lines).
struct PrefixCacheStats {
  uint64_t lookups = 0;              ///< lookup() calls
  uint64_t hits = 0;                 ///< lookups that reused >= 1 block
  uint64_t tokens_looked_up = 0;     ///< prompt ids of all lookups
  uint64_t tokens_reused = 0;        ///< prompt ids not recomputed thanks to hits
  uint64_t ram_bytes = 0;            ///< bytes of the blocks in RAM
  uint64_t ram_blocks = 0;           ///< blocks in RAM
  uint64_t ram_snapshots = 0;        ///< KDA snapshots in RAM
  uint64_t evictions = 0;            ///< blocks evicted from RAM
  uint64_t disk_bytes = 0;           ///< bytes of the files of the disk tier
  uint64_t disk_blocks = 0;          ///< files of the disk tier
  uint64_t disk_reads = 0;           ///< blocks read back from disk
  uint64_t disk_writes = 0;          ///< blocks written to disk
  uint64_t disk_rejected = 0;        ///< disk files refused (corrupt, truncated, foreign): misses
  uint64_t disk_write_failures = 0;  ///< blocks that could not be written to disk (disk full)
};

class PrefixCache {
 public:
  /// Reference counts on the blocks one sequence uses (its hit and the blocks it stored);
  /// released by release() or when the Pin is destroyed. Movable; must not outlive the cache.
  class Pin {
   public:
    Pin() = default;
    Pin(Pin&& o) noexcept;
    Pin& operator=(Pin&& o) noexcept;
    Pin(const Pin&) = delete;
    Pin& operator=(const Pin&) = delete;
    ~Pin();
    void release();

   private:
    friend class PrefixCache;
    PrefixCache* cache_ = nullptr;
    std::vector<uint64_t> keys_;   ///< blocks this pin holds a reference on
    std::vector<uint64_t> chain_;  ///< keys of blocks 0..k of the sequence's ids (store() resumes there)
    uint64_t generation_ = 0;      ///< the cache's clear() generation its references belong to
  };

  /// `model`: the model whose states are cached (must outlive the cache); `fingerprint`:
  /// model_fingerprint() of it (keys and disk files carry it). Errors: k3::Error naming the
  /// option (block_tokens not a positive multiple of 64, snapshot_every < 0) or the disk
  /// directory (cannot be created / is not a directory).
  PrefixCache(const Model& model, std::string fingerprint, PrefixCacheOptions opt = {});
  /// Writes every RAM block not yet on disk to the disk tier (when there is one).
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  /// For a new prompt: the state after its longest usable cached prefix. Returns the number
  /// of reused ids L (0 on a miss: `*state` untouched) and sets *state to a sequence holding
  /// prompt[0, L) (its MLA caches keep their reserved capacity when `*state` is fresh). The hit
  /// chain is pinned in *pin. L < prompt.size() always (the last id's logits are needed).
  /// `partition` (0 = shared) salts the key chain: only blocks stored with the same partition
  /// are found (in RAM and on disk).
  /// `media`: the prompt's images (MediaKey); a block overlapping an image's positions is keyed
  /// by the image's digest too, so two different images never share a block (nor any later
  /// block of the chain) and the same image at the same positions is found again.
  int64_t lookup(std::span<const int32_t> prompt, SequenceState* state, Pin* pin, uint64_t partition = 0,
                 std::span<const MediaKey> media = {});

  /// Positions in (0, n_prompt) where a prefill of an n_prompt-id prompt must stop for a KDA
  /// snapshot (ascending): multiples of snapshot_every·B, and the replay boundary.
  std::vector<int64_t> snapshot_points(int64_t n_prompt) const;

  /// Stores what `seq` holds of `ids` (seq.n_past() == ids.size()): every full block not yet
  /// cached (MLA rows copied from seq), and a KDA snapshot when ids.size() is a block boundary
  /// listed by snapshot_points(n_prompt) and that block has none. Blocks stored are pinned in
  /// *pin (may be null). A block that does not fit the budget is not stored. Only committed
  /// prefill states may be stored (never a speculative one). Errors: k3::Error when
  /// seq.n_past() != ids.size(). `partition`: as for lookup() (a pin's chain must keep one).
  /// `media`: as for lookup() (positions of the whole prompt; spans past ids.size() are unused).
  void store(std::span<const int32_t> ids, int64_t n_prompt, const SequenceState& seq, Pin* pin,
             uint64_t partition = 0, std::span<const MediaKey> media = {});

  /// Drops every RAM block (pinned ones too) and deletes the disk tier's files.
  void clear();

  PrefixCacheStats stats() const;
  const PrefixCacheOptions& options() const { return opt_; }
  /// The snapshot interval in effect (blocks).
  int64_t snapshot_every() const { return snapshot_every_; }
  /// Bytes of one KDA snapshot and of one block's MLA rows for this model, as the RAM budget
  /// counts them. Under N ranks a snapshot counts its one-process bytes (every rank's heads,
  /// SequenceState::group_snapshot_floats), so that every rank of a group picks the same
  /// snapshot interval and evicts the same blocks; a rank holds only its heads' share.
  uint64_t snapshot_bytes() const { return group_snapshot_floats_ * 4; }
  uint64_t block_mla_bytes() const { return block_mla_floats_ * 4; }
  const std::string& fingerprint() const { return fingerprint_; }

  struct Block;  // prefix_cache.cpp

 private:
  void unpin(const std::vector<uint64_t>& keys, uint64_t generation);
  /// Points `pin` at this cache; a pin of an older clear() generation drops its stale keys.
  void adopt_locked(Pin& pin);
  void evict_to_budget_locked(uint64_t incoming);
  /// Bytes of `b` as the RAM budget counts them (snapshot_bytes() for its KDA snapshot).
  uint64_t accounted_bytes(const Block& b) const;
  void touch_locked(Block& b);
  uint64_t block_key(uint64_t parent, std::span<const int32_t> ids) const;
  /// The parent a block at index b is keyed under: `parent` itself when no image overlaps the
  /// block, else the first 8 bytes of SHA-256(parent, each overlapping image's position in the
  /// block, length and digest). Blocks store this salted parent (disk files too).
  uint64_t media_parent(uint64_t parent, int64_t b, std::span<const MediaKey> media) const;
  /// The parent of block 0 of `partition`: the fingerprint hash, salted unless partition is 0.
  uint64_t root_key(uint64_t partition) const;
  Block* find_locked(uint64_t key, uint64_t parent, std::span<const int32_t> ids, int64_t index);
  void insert_locked(std::unique_ptr<Block> b);
  void write_to_disk_locked(const Block& b);

  const Model& model_;
  std::string fingerprint_;
  uint64_t fp_hash_ = 0;
  PrefixCacheOptions opt_;
  int64_t snapshot_every_ = 1;
  uint64_t block_mla_floats_ = 0, snapshot_floats_ = 0;  ///< this rank's floats per block / snapshot
  uint64_t group_snapshot_floats_ = 0;                    ///< one process's floats per snapshot
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, std::unique_ptr<Block>> blocks_;
  uint64_t tick_ = 0;
  uint64_t generation_ = 0;  ///< bumped by clear(): older pins hold no references
  PrefixCacheStats stats_;
  std::unique_ptr<PrefixCacheDisk> disk_;
};

}  // namespace k3
