// ExpertStore: layout of the experts in the shards, the I/O thread pool, the LRU cache.
#include "io/expert_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/error.h"
#include "io/safetensors.h"
#include "io/tensor_table.h"

namespace k3 {

namespace {

constexpr uint64_t kAlign = 4096;  // O_DIRECT offset / length / buffer alignment (logical block <= 4 KiB)

uint64_t align_down(uint64_t x) { return x / kAlign * kAlign; }
uint64_t align_up(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

std::string shape_text(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

/// One shard: a buffered descriptor always, an O_DIRECT one while the file system accepts it.
struct ShardFile {
  std::string name;  // file name inside the checkpoint directory (for errors)
  std::string path;
  int fd_buffered = -1;
  int fd_direct = -1;
  std::atomic<bool> direct_ok{false};
  std::atomic<uint64_t> n_direct{0}, n_buffered{0};
  ~ShardFile() {
    if (fd_buffered >= 0) ::close(fd_buffered);
    if (fd_direct >= 0) ::close(fd_direct);
  }
};

/// One aligned pread: file bytes [file_off, file_off + len) land at buffer offset buf_off;
/// the expert's own bytes in it end at need_end (relative to file_off).
struct Run {
  int file = 0;
  uint64_t file_off = 0, len = 0, buf_off = 0, need_end = 0;
};

/// Where one expert's tensors are: its runs and each tensor's offset in the expert buffer.
struct Slot {
  std::vector<Run> runs;
  uint64_t buf_bytes = 0;    // aligned buffer size
  uint64_t bytes = 0;        // the six tensors' own bytes
  uint64_t tensor_off[6]{};  // w1.packed, w1.scale, w2.packed, w2.scale, w3.packed, w3.scale
  int64_t rows[3]{}, cols[3]{};
};

enum class State { Loading, Ready, Failed };

struct Entry {
  uint64_t key = 0;
  int layer = 0;
  int64_t expert = 0;
  const Slot* slot = nullptr;
  State state = State::Loading;
  std::string error;
  uint8_t* buf = nullptr;
  ExpertMatrices m;
  int pins = 0;
  bool in_lru = false;
  bool queued_low = false;     // waiting in the prefetch queue (its read has not begun)
  bool from_prefetch = false;  // its read was queued by prefetch()
  bool used = false;           // acquired since (only tracked for from_prefetch)
  std::list<Entry*>::iterator lru_it;
  ~Entry() { std::free(buf); }
};

}  // namespace

struct ExpertStore::Impl {
  const Checkpoint& ck;
  ExpertStoreOptions opt;
  int64_t E = 0;
  std::vector<int> moe_index;  // layer -> index into slots (-1: not a MoE layer)
  std::vector<std::vector<Slot>> slots;
  std::vector<std::unique_ptr<ShardFile>> files;
  Layout lay;
  uint64_t total_bytes = 0;

  mutable std::mutex mu;
  mutable std::condition_variable ready_cv;  // an entry left Loading
  std::condition_variable work_cv;           // queue non-empty or stop
  std::deque<Entry*> queue;  // reads for acquire(): taken first
  std::deque<Entry*> low;    // reads for prefetch()
  std::map<int, std::vector<Entry*>> standing;  // layer -> the experts its prediction pins
  std::unordered_map<uint64_t, std::unique_ptr<Entry>> entries;
  std::list<Entry*> lru;  // unpinned resident entries, most recent first
  uint64_t resident = 0;
  ExpertStoreStats st;
  bool stop = false;
  std::vector<std::thread> threads;
  int in_flight = 0;      // reads being served by I/O threads
  double busy_since = 0;  // when in_flight last left 0

  Impl(const Checkpoint& c, const ExpertStoreOptions& o) : ck(c), opt(o) {
    if (opt.io_threads < 1)
      throw Error("expert store: io_threads must be >= 1, found " + std::to_string(opt.io_threads));
    const ModelConfig& cfg = ck.config();
    E = cfg.num_experts;
    build_layout(cfg);
    for (int i = 0; i < opt.io_threads; ++i) threads.emplace_back([this] { io_loop(); });
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> g(mu);
      stop = true;
    }
    work_cv.notify_all();
    for (auto& t : threads) t.join();
    for (auto& [size, b] : pool) std::free(b);
  }

  int open_file(const std::string& fname, std::map<std::string, int>& by_name) {
    auto it = by_name.find(fname);
    if (it != by_name.end()) return it->second;
    auto f = std::make_unique<ShardFile>();
    f->name = fname;
    f->path = (ck.dir() / fname).string();
    f->fd_buffered = ::open(f->path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f->fd_buffered < 0) throw Error(f->path + ": cannot open for expert streaming: " + std::strerror(errno));
    if (opt.direct) {
      f->fd_direct = ::open(f->path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
      f->direct_ok = f->fd_direct >= 0;  // EINVAL on tmpfs and other file systems without O_DIRECT
    }
    const int idx = static_cast<int>(files.size());
    files.push_back(std::move(f));
    by_name.emplace(fname, idx);
    return idx;
  }

  void build_layout(const ModelConfig& cfg) {
    static constexpr TensorRole kMatrices[3] = {TensorRole::ExpertW1, TensorRole::ExpertW2, TensorRole::ExpertW3};
    std::map<std::string, int> file_idx;
    std::map<int, std::unordered_map<std::string, uint64_t>> offsets;  // file -> tensor -> offset
    moe_index.assign(cfg.plan.size(), -1);
    for (size_t il = 0; il < cfg.plan.size(); ++il) {
      if (cfg.plan[il].ffn != FfnKind::LatentMoE) continue;
      moe_index[il] = static_cast<int>(slots.size());
      slots.emplace_back(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) {
        struct Piece {
          int file;
          uint64_t off, len;
          int part;
        };
        std::vector<Piece> pieces;
        Slot& s = slots.back()[static_cast<size_t>(e)];
        for (int m = 0; m < 3; ++m) {
          // The table names the pair: .weight_packed (part 2m) and .weight_scale (part 2m+1).
          const TensorSpec spec = tensor_spec(cfg, kMatrices[m], static_cast<int>(il), static_cast<int>(e));
          const std::vector<StoredTensor> pair = stored_tensors(spec);
          for (int k = 0; k < 2; ++k) {
            const int p = 2 * m + k;
            const StoredTensor& want = pair[static_cast<size_t>(k)];
            const TensorView& v = ck.get(want.name);
            if (v.dtype != want.dtype || v.shape != want.shape)
              throw Error(v.file + ": tensor '" + v.name + "': expected U8" + shape_text(want.shape) +
                          " (MXFP4 of logical " + shape_text(spec.shape) + ", spec §4) for expert streaming, found " +
                          std::string(dtype_name(v.dtype)) + shape_text(v.shape));
            const int fi = open_file(v.file, file_idx);
            auto& om = offsets[fi];
            if (om.empty()) {
              const SafetensorsHeader h = read_safetensors_header(files[static_cast<size_t>(fi)]->path);
              om.reserve(h.entries.size());
              for (const auto& en : h.entries) om.emplace(en.name, en.offset);
            }
            auto oit = om.find(v.name);
            if (oit == om.end())
              throw Error(files[static_cast<size_t>(fi)]->path + ": tensor '" + v.name + "' not in its header");
            pieces.push_back({fi, oit->second, v.nbytes, p});
            s.bytes += v.nbytes;
          }
          s.rows[m] = spec.shape[0];
          s.cols[m] = spec.shape[1];
        }
        std::sort(pieces.begin(), pieces.end(),
                  [](const Piece& a, const Piece& b) { return a.file != b.file ? a.file < b.file : a.off < b.off; });
        // Merge adjacent pieces into runs; each run is read aligned into its own aligned slice.
        size_t i = 0;
        while (i < pieces.size()) {
          size_t j = i + 1;
          uint64_t end = pieces[i].off + pieces[i].len;
          while (j < pieces.size() && pieces[j].file == pieces[i].file && pieces[j].off == end) {
            end += pieces[j].len;
            ++j;
          }
          Run r;
          r.file = pieces[i].file;
          r.file_off = align_down(pieces[i].off);
          r.len = align_up(end) - r.file_off;
          r.buf_off = s.buf_bytes;
          r.need_end = end - r.file_off;
          for (size_t q = i; q < j; ++q) s.tensor_off[pieces[q].part] = r.buf_off + (pieces[q].off - r.file_off);
          s.buf_bytes += r.len;
          s.runs.push_back(r);
          i = j;
        }
        lay.experts += 1;
        lay.runs += static_cast<int64_t>(s.runs.size());
        total_bytes += s.bytes;
      }
    }
  }

  const Slot& slot(int layer, int64_t e) const {
    if (layer < 0 || layer >= static_cast<int>(moe_index.size()) || moe_index[static_cast<size_t>(layer)] < 0)
      throw Error("expert store: layer " + std::to_string(layer) + " is not a LatentMoE layer");
    if (e < 0 || e >= E)
      throw Error("expert store: expert " + std::to_string(e) + " outside [0, " + std::to_string(E) + ")");
    return slots[static_cast<size_t>(moe_index[static_cast<size_t>(layer)])][static_cast<size_t>(e)];
  }

  // ---- buffers (caller holds mu) ----
  // Freed expert buffers are kept for reuse (at most kPoolBuffers): a fresh 4 KiB-aligned
  // allocation of an expert's size is a new mapping whose pages the kernel zeroes on the first
  // read into them, CPU time per read that a reused buffer does not cost.
  static constexpr size_t kPoolBuffers = 16;
  std::vector<std::pair<uint64_t, uint8_t*>> pool;  // (size, buffer)

  uint8_t* take_buffer(uint64_t need) {
    for (size_t i = 0; i < pool.size(); ++i)
      if (pool[i].first == need) {
        uint8_t* b = pool[i].second;
        pool[i] = pool.back();
        pool.pop_back();
        return b;
      }
    auto* b = static_cast<uint8_t*>(std::aligned_alloc(kAlign, align_up(need)));
    if (!b) throw Error("expert store: out of memory allocating " + std::to_string(need) + " bytes");
    return b;
  }

  /// Forgets `en` (not pinned, not queued); its buffer goes to the pool or is freed.
  void drop(Entry* en) {
    if (en->buf && pool.size() < kPoolBuffers) {
      pool.emplace_back(en->slot->buf_bytes, en->buf);
      en->buf = nullptr;
    }
    entries.erase(en->key);
  }

  // ---- cache (caller holds mu) ----
  void evict_to(uint64_t budget) {
    while (resident > budget && !lru.empty()) {
      Entry* victim = lru.back();
      lru.pop_back();
      resident -= victim->slot->buf_bytes;
      ++st.evictions;
      if (victim->from_prefetch && !victim->used) {
        ++st.prefetch_wasted;
        st.prefetch_wasted_bytes += victim->slot->buf_bytes;
      }
      drop(victim);
    }
  }

  void unpin(Entry* en) {
    if (--en->pins > 0) return;
    if (en->state == State::Failed) {  // forget it: a later acquire reads again
      resident -= en->slot->buf_bytes;
      drop(en);
      return;
    }
    lru.push_front(en);
    en->lru_it = lru.begin();
    en->in_lru = true;
    evict_to(opt.cache_bytes);
  }

  /// Orders reads by shard, then offset (the drive sees ascending offsets within a batch).
  static void sort_by_offset(std::vector<Entry*>& v) {
    std::sort(v.begin(), v.end(), [](const Entry* a, const Entry* b) {
      const Run& x = a->slot->runs.front();
      const Run& y = b->slot->runs.front();
      return x.file != y.file ? x.file < y.file : x.file_off < y.file_off;
    });
  }

  /// Drops the standing prediction of `layer`: an expert whose read has not begun and that
  /// nothing else pins is dropped unread; the others are unpinned.
  void release_prediction(int layer) {
    auto it = standing.find(layer);
    if (it == standing.end()) return;
    for (Entry* en : it->second) {
      if (en->queued_low && en->pins == 2) {  // the prediction's pin and the I/O pin
        low.erase(std::find(low.begin(), low.end(), en));
        resident -= en->slot->buf_bytes;
        ++st.prefetch_cancelled;
        drop(en);
      } else {
        unpin(en);
      }
    }
    standing.erase(it);
  }

  /// A new entry for (layer, e), pinned by its caller and by the I/O thread that will read it.
  Entry* new_entry(uint64_t key, int layer, int64_t e, const Slot* sl) {
    const uint64_t need = sl->buf_bytes;
    // Make room first so the budget bounds the peak (pinned experts are never evicted).
    evict_to(opt.cache_bytes > need ? opt.cache_bytes - need : 0);
    auto owned = std::make_unique<Entry>();
    Entry* en = owned.get();
    en->key = key;
    en->layer = layer;
    en->expert = e;
    en->slot = sl;
    en->buf = take_buffer(need);
    en->pins = 2;  // the caller's and the I/O thread's
    resident += need;
    entries.emplace(key, std::move(owned));
    return en;
  }

  /// The slots of `ids` of `layer`; throws on a bad layer, an id out of range or repeated.
  std::vector<const Slot*> checked_slots(int layer, std::span<const int64_t> ids, const char* what) const {
    std::vector<const Slot*> sl;
    sl.reserve(ids.size());
    for (int64_t e : ids) sl.push_back(&slot(layer, e));
    for (size_t i = 0; i < ids.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (ids[i] == ids[j])
          throw Error("expert store: expert " + std::to_string(ids[i]) + " of layer " + std::to_string(layer) +
                      " requested twice in one " + what);
    return sl;
  }

  uint64_t key_of(int layer, int64_t e) const {
    return static_cast<uint64_t>(layer) * static_cast<uint64_t>(E) + static_cast<uint64_t>(e);
  }

  // ---- I/O ----
  /// Reads run r of `en`; returns an empty string or the error.
  std::string read_run(const Entry& en, const Run& r, uint64_t& got_bytes) {
    ShardFile& f = *files[static_cast<size_t>(r.file)];
    uint8_t* dst = en.buf + r.buf_off;
    uint64_t done = 0;
    bool direct = f.direct_ok.load();
    while (done < r.len) {
      const int fd = direct ? f.fd_direct : f.fd_buffered;
      const ssize_t n =
          ::pread(fd, dst + done, static_cast<size_t>(r.len - done), static_cast<off_t>(r.file_off + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        if (direct && errno == EINVAL) {  // the file system refuses O_DIRECT here: buffered from now on
          f.direct_ok = false;
          direct = false;
          continue;
        }
        return std::string("pread failed: ") + std::strerror(errno);
      }
      if (n == 0) break;  // end of file
      done += static_cast<uint64_t>(n);
      if (direct && done % kAlign != 0) break;  // short O_DIRECT read: end of file
    }
    (direct ? f.n_direct : f.n_buffered) += 1;
    got_bytes += done;
    if (done < r.need_end) {
      struct stat sb {};
      const long long size = ::fstat(f.fd_buffered, &sb) == 0 ? static_cast<long long>(sb.st_size) : -1;
      return "truncated shard: needs bytes [" + std::to_string(r.file_off) + ", " +
             std::to_string(r.file_off + r.need_end) + ") but the file has " + std::to_string(size) + " bytes";
    }
    return {};
  }

  void io_loop() {
    for (;;) {
      Entry* en = nullptr;
      {
        std::unique_lock<std::mutex> lk(mu);
        work_cv.wait(lk, [&] { return stop || !queue.empty() || !low.empty(); });
        if (stop) return;
        if (!queue.empty()) {
          en = queue.front();
          queue.pop_front();
        } else {
          en = low.front();
          low.pop_front();
          en->queued_low = false;
        }
        if (in_flight++ == 0) busy_since = now_s();
      }
      // en stays alive while it is read: acquire() gave it a pin of its own, dropped below.
      const double t0 = now_s();
      std::string err;
      uint64_t got = 0, nreads = 0;
      for (const Run& r : en->slot->runs) {
        err = read_run(*en, r, got);
        ++nreads;
        if (!err.empty()) {
          err = files[static_cast<size_t>(r.file)]->path + ": " + err + " (reading routed expert " +
                std::to_string(en->expert) + " of layer " + std::to_string(en->layer) + ")";
          break;
        }
      }
      const double dt = now_s() - t0;
      {
        std::lock_guard<std::mutex> g(mu);
        if (--in_flight == 0) st.busy_seconds += now_s() - busy_since;
        st.reads += nreads;
        st.bytes_read += got;
        st.read_seconds += dt;
        if (err.empty()) {
          const Slot& s = *en->slot;
          en->m.w1 = {en->buf + s.tensor_off[0], en->buf + s.tensor_off[1], s.rows[0], s.cols[0]};
          en->m.w2 = {en->buf + s.tensor_off[2], en->buf + s.tensor_off[3], s.rows[1], s.cols[1]};
          en->m.w3 = {en->buf + s.tensor_off[4], en->buf + s.tensor_off[5], s.rows[2], s.cols[2]};
          en->state = State::Ready;
        } else {
          en->state = State::Failed;
          en->error = err;
        }
        unpin(en);  // the I/O pin
      }
      ready_cv.notify_all();
    }
  }
};

ExpertStore::ExpertStore(const Checkpoint& ck, const ExpertStoreOptions& options)
    : impl_(std::make_unique<Impl>(ck, options)) {}
ExpertStore::~ExpertStore() = default;

ExpertStore::Lease ExpertStore::acquire(int layer, std::span<const int64_t> ids) {
  Impl& s = *impl_;
  const std::vector<const Slot*> sl = s.checked_slots(layer, ids, "acquire");
  Lease lease;
  lease.store_ = impl_.get();
  bool queued = false;
  {
    std::lock_guard<std::mutex> g(s.mu);
    std::vector<Entry*> to_read;  // new entries and prefetched ones whose read had not begun
    for (size_t i = 0; i < ids.size(); ++i) {
      const uint64_t key = s.key_of(layer, ids[i]);
      auto it = s.entries.find(key);
      Entry* en = nullptr;
      if (it != s.entries.end()) {
        en = it->second.get();
        ++s.st.hits;
        if (en->from_prefetch && !en->used) {
          en->used = true;
          ++s.st.prefetch_used;
        }
        if (en->in_lru) {
          s.lru.erase(en->lru_it);
          en->in_lru = false;
        }
        if (en->queued_low) {  // promoted to the acquire queue
          s.low.erase(std::find(s.low.begin(), s.low.end(), en));
          en->queued_low = false;
          to_read.push_back(en);
        }
        ++en->pins;
      } else {
        ++s.st.misses;
        en = s.new_entry(key, layer, ids[i], sl[i]);
        to_read.push_back(en);
      }
      lease.entries_.push_back(en);
    }
    // The layer's standing prediction: how many of these it named, then its pins go.
    auto pit = s.standing.find(layer);
    if (pit != s.standing.end()) {
      s.st.predicted += ids.size();
      for (const Entry* p : pit->second)
        s.st.predicted_right += static_cast<uint64_t>(std::count(ids.begin(), ids.end(), p->expert));
      s.release_prediction(layer);
    }
    Impl::sort_by_offset(to_read);
    s.queue.insert(s.queue.end(), to_read.begin(), to_read.end());
    queued = !to_read.empty();
  }
  if (queued) s.work_cv.notify_all();
  return lease;
}

void ExpertStore::prefetch(int layer, std::span<const int64_t> ids) {
  Impl& s = *impl_;
  const std::vector<const Slot*> sl = s.checked_slots(layer, ids, "prefetch");
  if (!s.opt.prefetch) return;
  bool queued = false;
  {
    std::lock_guard<std::mutex> g(s.mu);
    std::vector<Entry*> pinned, to_read;
    for (size_t i = 0; i < ids.size(); ++i) {
      const uint64_t key = s.key_of(layer, ids[i]);
      auto it = s.entries.find(key);
      Entry* en = nullptr;
      if (it != s.entries.end()) {
        en = it->second.get();
        if (en->in_lru) {
          s.lru.erase(en->lru_it);
          en->in_lru = false;
        }
        ++en->pins;
      } else {
        en = s.new_entry(key, layer, ids[i], sl[i]);
        en->from_prefetch = true;
        en->queued_low = true;
        ++s.st.prefetched;
        to_read.push_back(en);
      }
      pinned.push_back(en);
    }
    s.release_prediction(layer);  // a previous prediction of this layer (after the new pins)
    s.standing[layer] = std::move(pinned);
    Impl::sort_by_offset(to_read);
    s.low.insert(s.low.end(), to_read.begin(), to_read.end());
    queued = !to_read.empty();
  }
  if (queued) s.work_cv.notify_all();
}

std::string ExpertStore::io_mode() const {
  uint64_t d = 0, b = 0;
  for (const auto& f : impl_->files) {
    d += f->n_direct;
    b += f->n_buffered;
  }
  if (d == 0 && b == 0) {
    bool all = !impl_->files.empty();
    for (const auto& f : impl_->files) all = all && f->direct_ok;
    return all ? "O_DIRECT" : "buffered";
  }
  return b == 0 ? "O_DIRECT" : d == 0 ? "buffered" : "mixed";
}

uint64_t ExpertStore::expert_bytes(int layer, int64_t e) const { return impl_->slot(layer, e).bytes; }
uint64_t ExpertStore::total_expert_bytes() const { return impl_->total_bytes; }
ExpertStore::Layout ExpertStore::layout() const { return impl_->lay; }
const ExpertStoreOptions& ExpertStore::options() const { return impl_->opt; }

ExpertStoreStats ExpertStore::stats() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  ExpertStoreStats r = impl_->st;
  r.resident_bytes = impl_->resident;
  if (impl_->in_flight > 0) r.busy_seconds += now_s() - impl_->busy_since;
  return r;
}

void ExpertStore::reset_stats() {
  std::lock_guard<std::mutex> g(impl_->mu);
  impl_->st = ExpertStoreStats{};
  if (impl_->in_flight > 0) impl_->busy_since = now_s();
}

// ---- Lease ----
ExpertStore::Lease::Lease(Lease&& o) noexcept : store_(o.store_), entries_(std::move(o.entries_)) {
  o.store_ = nullptr;
  o.entries_.clear();
}
ExpertStore::Lease& ExpertStore::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    release();
    store_ = o.store_;
    entries_ = std::move(o.entries_);
    o.store_ = nullptr;
    o.entries_.clear();
  }
  return *this;
}
ExpertStore::Lease::~Lease() { release(); }

void ExpertStore::Lease::release() {
  if (!store_) return;
  {
    std::lock_guard<std::mutex> g(store_->mu);
    for (void* p : entries_) store_->unpin(static_cast<Entry*>(p));
  }
  entries_.clear();
  store_ = nullptr;
}

bool ExpertStore::Lease::ready(size_t i) const {
  std::lock_guard<std::mutex> g(store_->mu);
  return static_cast<const Entry*>(entries_.at(i))->state != State::Loading;
}

const ExpertMatrices& ExpertStore::Lease::wait(size_t i) const {
  const Entry* en = static_cast<const Entry*>(entries_.at(i));
  std::unique_lock<std::mutex> lk(store_->mu);
  if (en->state == State::Loading) {
    const double t0 = now_s();
    store_->ready_cv.wait(lk, [&] { return en->state != State::Loading; });
    store_->st.wait_seconds += now_s() - t0;
  }
  if (en->state == State::Failed) throw Error(en->error);
  return en->m;
}

}  // namespace k3
