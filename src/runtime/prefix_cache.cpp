// PrefixCache: see prefix_cache.h (the design) and spec algorithms.md §6.
#include "runtime/prefix_cache.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_set>

#include <openssl/sha.h>

#include "core/error.h"
#include "runtime/model_fingerprint.h"
#include "runtime/prefix_cache_disk.h"

namespace k3 {

struct PrefixCache::Block {
  uint64_t key = 0, parent = 0;
  int64_t index = 0;
  std::vector<int32_t> ids;  ///< [B]
  std::vector<float> mla;    ///< [n_mla_layers, B, row]
  StateLog kda;              ///< empty, or the KDA state at the block's end (SequenceState::snapshot)
  int64_t refs = 0;          ///< pins (sequences using it) + the walk in progress
  int64_t children = 0;      ///< cached blocks whose parent this is
  uint64_t tick = 0;         ///< last use (LRU)
  bool on_disk = false;      ///< the disk tier holds exactly this content
};

uint64_t PrefixCache::accounted_bytes(const Block& b) const {
  return (b.mla.size() + (b.kda.empty() ? 0 : group_snapshot_floats_)) * 4 + b.ids.size() * 4 + sizeof(Block);
}

// ---------------------------------------------------------------------------------------------
// Pin

PrefixCache::Pin::Pin(Pin&& o) noexcept
    : cache_(o.cache_), keys_(std::move(o.keys_)), chain_(std::move(o.chain_)), generation_(o.generation_) {
  o.cache_ = nullptr;
  o.keys_.clear();
  o.chain_.clear();
}
PrefixCache::Pin& PrefixCache::Pin::operator=(Pin&& o) noexcept {
  if (this != &o) {
    release();
    cache_ = o.cache_;
    keys_ = std::move(o.keys_);
    chain_ = std::move(o.chain_);
    generation_ = o.generation_;
    o.cache_ = nullptr;
    o.keys_.clear();
    o.chain_.clear();
  }
  return *this;
}
PrefixCache::Pin::~Pin() { release(); }
void PrefixCache::Pin::release() {
  if (cache_ != nullptr && !keys_.empty()) cache_->unpin(keys_, generation_);
  keys_.clear();
  chain_.clear();
  cache_ = nullptr;
}

// ---------------------------------------------------------------------------------------------

PrefixCache::PrefixCache(const Model& model, std::string fingerprint, PrefixCacheOptions opt)
    : model_(model), fingerprint_(std::move(fingerprint)), opt_(std::move(opt)) {
  if (opt_.block_tokens < PrefillGrid::kKdaChunk || opt_.block_tokens % PrefillGrid::kKdaChunk != 0)
    throw Error("--cache-block: expected a positive multiple of 64 tokens (the KDA chunk), found " +
                std::to_string(opt_.block_tokens));
  if (opt_.snapshot_every < 0)
    throw Error("--cache-snapshot-every: expected >= 0 blocks (0 = auto), found " +
                std::to_string(opt_.snapshot_every));
  fp_hash_ = fnv1a64(fingerprint_.data(), fingerprint_.size());
  const SequenceState fresh = model_.new_sequence();
  block_mla_floats_ = static_cast<uint64_t>(opt_.block_tokens * fresh.mla_token_floats());
  snapshot_floats_ = static_cast<uint64_t>(fresh.snapshot_floats());
  group_snapshot_floats_ = static_cast<uint64_t>(fresh.group_snapshot_floats());
  if (opt_.snapshot_every > 0) {
    snapshot_every_ = opt_.snapshot_every;
  } else {
    // Auto: the shortest interval whose MLA rows weigh at least one snapshot (§6.2's page
    // unification); models without MLA layers snapshot every block.
    snapshot_every_ = block_mla_floats_ == 0
                          ? 1
                          : std::max<int64_t>(1, static_cast<int64_t>((group_snapshot_floats_ + block_mla_floats_ - 1) /
                                                                      block_mla_floats_));
  }
  if (!opt_.disk_dir.empty())
    disk_ =
        std::make_unique<PrefixCacheDisk>(opt_.disk_dir, opt_.disk_bytes, fingerprint_, opt_.block_tokens, opt_.log);
}

PrefixCache::~PrefixCache() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!disk_) return;
  // Children first, parents last: the disk tier drops its least recently written files first,
  // so a budget-limited directory keeps usable prefixes.
  std::vector<const Block*> order;
  for (const auto& [k, b] : blocks_)
    if (!b->on_disk || !disk_->contains(b->key)) order.push_back(b.get());
  std::sort(order.begin(), order.end(), [](const Block* a, const Block* b) { return a->index > b->index; });
  for (const Block* b : order) write_to_disk_locked(*b);
}

uint64_t PrefixCache::block_key(uint64_t parent, std::span<const int32_t> ids) const {
  uint64_t h = fnv1a64(&parent, sizeof parent, fp_hash_);
  return fnv1a64(ids.data(), ids.size() * sizeof(int32_t), h);
}

uint64_t PrefixCache::media_parent(uint64_t parent, int64_t b, std::span<const MediaKey> media) const {
  const int64_t B = opt_.block_tokens, b0 = b * B, b1 = b0 + B;
  std::vector<uint64_t> msg;  // parent, then (position in the block, length, digest) per image
  for (const MediaKey& m : media) {
    if (m.pos + m.n <= b0 || m.pos >= b1) continue;
    if (msg.empty()) msg.push_back(parent);
    msg.push_back(static_cast<uint64_t>(m.pos - b0));
    msg.push_back(static_cast<uint64_t>(m.n));
    msg.push_back(m.digest);
  }
  if (msg.empty()) return parent;
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(msg.data()), msg.size() * sizeof(uint64_t), d);
  uint64_t r = 0;
  std::memcpy(&r, d, sizeof r);
  return r;
}

uint64_t PrefixCache::root_key(uint64_t partition) const {
  return partition == 0 ? fp_hash_ : fnv1a64(&partition, sizeof partition, fp_hash_ ^ 0x9e3779b97f4a7c15ull);
}

void PrefixCache::touch_locked(Block& b) { b.tick = ++tick_; }

void PrefixCache::unpin(const std::vector<uint64_t>& keys, uint64_t generation) {
  std::lock_guard<std::mutex> lk(mu_);
  if (generation != generation_) return;  // clear() dropped the blocks these references were on
  for (uint64_t k : keys) {
    auto it = blocks_.find(k);
    if (it != blocks_.end() && it->second->refs > 0) --it->second->refs;
  }
}

void PrefixCache::adopt_locked(Pin& pin) {
  if (pin.cache_ != nullptr && pin.cache_ != this) throw Error("prefix cache: a pin of another cache");
  pin.cache_ = this;
  if (pin.generation_ != generation_) {
    pin.keys_.clear();
    pin.chain_.clear();
    pin.generation_ = generation_;
  }
}

void PrefixCache::write_to_disk_locked(const Block& b) {
  if (!disk_) return;
  DiskBlock d;
  d.key = b.key;
  d.parent = b.parent;
  d.index = b.index;
  d.ids = b.ids;
  d.mla = b.mla;
  d.kda.assign(b.kda.floats().begin(), b.kda.floats().end());
  if (disk_->write(d)) ++stats_.disk_writes;
}

void PrefixCache::evict_to_budget_locked(uint64_t incoming) {
  while (stats_.ram_bytes + incoming > opt_.ram_bytes) {
    Block* victim = nullptr;
    for (auto& [k, b] : blocks_)
      if (b->refs == 0 && b->children == 0 && (victim == nullptr || b->tick < victim->tick)) victim = b.get();
    if (victim == nullptr) return;  // everything left is in use
    if (disk_ && (!victim->on_disk || !disk_->contains(victim->key))) write_to_disk_locked(*victim);
    auto p = blocks_.find(victim->parent);
    if (p != blocks_.end()) --p->second->children;
    stats_.ram_bytes -= accounted_bytes(*victim);
    --stats_.ram_blocks;
    if (!victim->kda.empty()) --stats_.ram_snapshots;
    ++stats_.evictions;
    blocks_.erase(victim->key);
  }
}

void PrefixCache::insert_locked(std::unique_ptr<Block> b) {
  auto p = blocks_.find(b->parent);
  if (p != blocks_.end()) ++p->second->children;
  stats_.ram_bytes += accounted_bytes(*b);
  ++stats_.ram_blocks;
  if (!b->kda.empty()) ++stats_.ram_snapshots;
  touch_locked(*b);
  const uint64_t key = b->key;
  blocks_.emplace(key, std::move(b));
}

PrefixCache::Block* PrefixCache::find_locked(uint64_t key, uint64_t parent, std::span<const int32_t> ids,
                                             int64_t index) {
  auto same = [&](const Block& b) {
    return b.parent == parent && b.index == index && b.ids.size() == ids.size() &&
           std::equal(ids.begin(), ids.end(), b.ids.begin());
  };
  auto it = blocks_.find(key);
  if (it != blocks_.end()) return same(*it->second) ? it->second.get() : nullptr;
  if (!disk_ || !disk_->contains(key)) return nullptr;
  std::optional<DiskBlock> d = disk_->read(key, block_mla_floats_, snapshot_floats_);
  stats_.disk_rejected = disk_->rejected();
  if (!d) return nullptr;
  auto b = std::make_unique<Block>();
  b->key = d->key;
  b->parent = d->parent;
  b->index = d->index;
  b->ids = std::move(d->ids);
  b->mla = std::move(d->mla);
  if (!d->kda.empty()) b->kda = StateLog((b->index + 1) * opt_.block_tokens, 1, std::move(d->kda));
  b->on_disk = true;
  if (block_key(b->parent, b->ids) != key) {  // a valid CRC over a header that names other ids
    disk_->discard(key, "its ids and parent do not hash to its key");
    stats_.disk_rejected = disk_->rejected();
    return nullptr;
  }
  if (!same(*b)) return nullptr;
  evict_to_budget_locked(accounted_bytes(*b));
  if (stats_.ram_bytes + accounted_bytes(*b) > opt_.ram_bytes) return nullptr;
  ++stats_.disk_reads;
  Block* raw = b.get();
  insert_locked(std::move(b));
  return raw;
}

std::vector<int64_t> PrefixCache::snapshot_points(int64_t n_prompt) const {
  std::vector<int64_t> pts;
  const int64_t B = opt_.block_tokens, every = snapshot_every_ * B;
  // No cut may leave a lone last id the one-pass prefill would run inside a longer piece.
  const int64_t max_end = model_.prefill_grid().max_resume(n_prompt);
  for (int64_t p = every; p <= max_end; p += every) pts.push_back(p);
  const int64_t replay = (max_end / B) * B;  // where lookup() of this prompt (or an extension) can resume
  if (replay > 0 && (pts.empty() || pts.back() != replay)) pts.push_back(replay);
  std::sort(pts.begin(), pts.end());
  pts.erase(std::unique(pts.begin(), pts.end()), pts.end());
  return pts;
}

int64_t PrefixCache::lookup(std::span<const int32_t> prompt, SequenceState* state, Pin* pin, uint64_t partition,
                            std::span<const MediaKey> media) {
  if (state == nullptr || state->n_past() != 0) throw Error("prefix cache: lookup needs a fresh sequence state");
  const int64_t B = opt_.block_tokens;
  const int64_t n = static_cast<int64_t>(prompt.size());
  std::lock_guard<std::mutex> lk(mu_);
  ++stats_.lookups;
  stats_.tokens_looked_up += static_cast<uint64_t>(n);
  std::vector<Block*> chain;
  uint64_t parent = root_key(partition);
  // The hit leaves at least one id to compute (its logits are needed). A resume that leaves
  // exactly one id would run it alone (absorbed MLA, KDA decode step) where a one-pass prefill
  // runs it inside a longer piece, unless n-1 is on the prefill-chunk grid: then keep two, so
  // that the pieces compute every row as the one-pass prefill does (bit-identical).
  const int64_t max_end = model_.prefill_grid().max_resume(n);
  const int64_t max_blocks = max_end / B;
  chain.reserve(static_cast<size_t>(max_blocks));
  try {
    for (int64_t b = 0; b < max_blocks; ++b) {
      const std::span<const int32_t> ids = prompt.subspan(static_cast<size_t>(b * B), static_cast<size_t>(B));
      const uint64_t salted = media_parent(parent, b, media);
      Block* blk = find_locked(block_key(salted, ids), salted, ids, b);
      if (blk == nullptr) break;
      ++blk->refs;  // held while the walk may read more blocks from disk (which may evict)
      chain.push_back(blk);
      parent = blk->key;
    }
  } catch (...) {  // e.g. out of memory reading a disk block: no reference may leak
    for (Block* b : chain) --b->refs;
    throw;
  }
  int64_t j = static_cast<int64_t>(chain.size()) - 1;
  while (j >= 0 && chain[static_cast<size_t>(j)]->kda.empty()) --j;
  for (Block* b : chain) {
    --b->refs;
    touch_locked(*b);
  }
  if (j < 0) return 0;
  const int64_t L = (j + 1) * B;
  // The MLA rows of blocks 0..j, then the KDA state of block j's end.
  for (int64_t b = 0; b <= j; ++b) state->append_mla_rows(chain[static_cast<size_t>(b)]->mla, B);
  state->rollback_to(chain[static_cast<size_t>(j)]->kda, L);
  if (pin != nullptr) {
    adopt_locked(*pin);
    pin->chain_.clear();
    for (int64_t b = 0; b <= j; ++b) {
      Block* blk = chain[static_cast<size_t>(b)];
      pin->chain_.push_back(blk->key);
      if (std::find(pin->keys_.begin(), pin->keys_.end(), blk->key) != pin->keys_.end()) continue;
      ++blk->refs;
      pin->keys_.push_back(blk->key);
    }
  }
  ++stats_.hits;
  stats_.tokens_reused += static_cast<uint64_t>(L);
  return L;
}

void PrefixCache::store(std::span<const int32_t> ids, int64_t n_prompt, const SequenceState& seq, Pin* pin,
                        uint64_t partition, std::span<const MediaKey> media) {
  if (seq.n_past() != static_cast<int64_t>(ids.size()))
    throw Error("prefix cache: store of " + std::to_string(ids.size()) + " ids from a sequence holding " +
                std::to_string(seq.n_past()));
  const int64_t B = opt_.block_tokens;
  const int64_t nb = static_cast<int64_t>(ids.size()) / B;
  if (nb == 0) return;
  const int64_t pos = static_cast<int64_t>(ids.size());
  const std::vector<int64_t> pts = snapshot_points(n_prompt);
  const bool snapshot_here = pos % B == 0 && std::binary_search(pts.begin(), pts.end(), pos);
  std::lock_guard<std::mutex> lk(mu_);
  if (pin != nullptr) adopt_locked(*pin);
  std::unordered_set<uint64_t> pinned;
  if (pin != nullptr) pinned.insert(pin->keys_.begin(), pin->keys_.end());
  std::vector<Block*> walk;  // temporarily held so that eviction cannot take the chain apart
  uint64_t parent = root_key(partition);
  bool complete = true;
  // Blocks this sequence already walked (pinned, so present unless clear() ran) are not
  // re-hashed: the walk resumes after them.
  int64_t b0 = 0;
  if (pin != nullptr && !pin->chain_.empty()) {
    const int64_t k = std::min<int64_t>(static_cast<int64_t>(pin->chain_.size()), nb);
    auto it = blocks_.find(pin->chain_[static_cast<size_t>(k - 1)]);
    if (it != blocks_.end() && it->second->index == k - 1 && it->second->refs > 0) {
      b0 = k;
      parent = pin->chain_[static_cast<size_t>(k - 1)];
      if (k == nb) walk.push_back(it->second.get()), ++it->second->refs;
    } else {
      pin->chain_.clear();
    }
  }
  walk.reserve(static_cast<size_t>(nb));
  try {
    for (int64_t b = b0; b < nb; ++b) {
      const std::span<const int32_t> bid = ids.subspan(static_cast<size_t>(b * B), static_cast<size_t>(B));
      const uint64_t salted = media_parent(parent, b, media);
      const uint64_t key = block_key(salted, bid);
      Block* blk = nullptr;
      auto it = blocks_.find(key);
      if (it != blocks_.end()) {
        blk = it->second.get();
        if (blk->parent != salted || blk->index != b || !std::equal(bid.begin(), bid.end(), blk->ids.begin())) {
          complete = false;  // a 64-bit key collision: keep the block there, store nothing past it
          break;
        }
      } else {
        auto nbk = std::make_unique<Block>();
        nbk->key = key;
        nbk->parent = salted;
        nbk->index = b;
        nbk->ids.assign(bid.begin(), bid.end());
        nbk->mla.reserve(block_mla_floats_);
        seq.copy_mla_rows(b * B, (b + 1) * B, nbk->mla);
        evict_to_budget_locked(accounted_bytes(*nbk));
        if (stats_.ram_bytes + accounted_bytes(*nbk) > opt_.ram_bytes) {
          complete = false;  // does not fit the budget: stop here (children would be unreachable)
          break;
        }
        blk = nbk.get();
        insert_locked(std::move(nbk));
      }
      touch_locked(*blk);
      ++blk->refs;
      walk.push_back(blk);
      if (pin != nullptr && static_cast<int64_t>(pin->chain_.size()) == b) pin->chain_.push_back(key);
      parent = key;
    }
    if (complete && snapshot_here) {
      Block& last = *walk.back();
      if (last.kda.empty()) {
        const uint64_t extra = group_snapshot_floats_ * 4;
        evict_to_budget_locked(extra);
        if (stats_.ram_bytes + extra <= opt_.ram_bytes) {
          last.kda = seq.snapshot();
          last.on_disk = false;  // the disk copy (if any) lacks the snapshot
          stats_.ram_bytes += extra;
          ++stats_.ram_snapshots;
        }
      }
    }
  } catch (...) {  // e.g. out of memory copying rows: no reference may leak
    for (Block* b : walk) --b->refs;
    throw;
  }
  for (Block* b : walk) {
    if (pin != nullptr && pinned.insert(b->key).second) {
      pin->keys_.push_back(b->key);  // keeps the walk's reference
    } else {
      --b->refs;
    }
  }
}

void PrefixCache::clear() {
  std::lock_guard<std::mutex> lk(mu_);
  blocks_.clear();
  ++generation_;
  stats_.ram_bytes = stats_.ram_blocks = stats_.ram_snapshots = 0;
  if (disk_) disk_->clear();
}

PrefixCacheStats PrefixCache::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  PrefixCacheStats s = stats_;
  if (disk_) {
    s.disk_bytes = disk_->bytes();
    s.disk_blocks = disk_->files();
    s.disk_rejected = disk_->rejected();
    s.disk_write_failures = disk_->write_failures();
  }
  return s;
}

}  // namespace k3
