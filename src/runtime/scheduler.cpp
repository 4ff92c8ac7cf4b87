// Continuous batching: the engine thread's step loop (see scheduler.h).
#include "runtime/scheduler.h"

#include <algorithm>
#include <cmath>
#include <exception>

#include <nlohmann/json.hpp>

#include "io/model_summary.h"
#include "runtime/stats.h"

namespace k3 {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// SeqHandle

std::optional<SeqEvent> SeqHandle::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  if (finished_) return std::nullopt;
  if (!cv_.wait_for(lk, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  SeqEvent e = std::move(events_.front());
  events_.pop_front();
  if (e.done) finished_ = true;
  return e;
}

void SeqHandle::push(SeqEvent e) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

// ---------------------------------------------------------------------------------------------
// Slots

/// A running sequence: its request, state, sampler and progress.
struct Scheduler::Slot {
  SeqRequest req;
  std::shared_ptr<SeqHandle> handle;
  SequenceState seq;
  Sampler sampler;
  size_t prefilled = 0;       ///< prompt ids fed so far
  int32_t pending = -1;       ///< the last sampled id, fed by the next step (decode phase)
  int64_t n_generated = 0;    ///< ids sampled
  size_t forced_pos = 0;      ///< next forced id
  size_t reused = 0;          ///< prompt ids taken from the prefix cache
  std::vector<int64_t> cuts;  ///< the cache's snapshot points of this prompt (ascending)
  PrefixCache::Pin pin;       ///< the cached blocks this sequence uses
  int64_t id = 0;             ///< slot id in [0, n_parallel)
  bool from_kept = false;     ///< continues a kept slot state: its blocks are not cached
  /// keep_slot_states: where the kept state is cut (exact_resume_point of the prompt; 0 = none),
  /// and the KDA state there (SequenceState::snapshot), taken when prefill reaches it.
  int64_t kept_point = 0;
  StateLog kept_kda;
  std::vector<int32_t> out;   ///< ids sampled
  // Speculative decoding (Options::speculation).
  std::unique_ptr<Drafter> drafter;  ///< null: plain decoding
  Draft draft;                       ///< this step's drafts (verified when non-empty)
  std::vector<int32_t> window;       ///< this step's decode-form window [pending, drafts]
  StateLog kda_steps;                ///< per-token KDA states of the window (rollback)
  int64_t n_drafted = 0;             ///< draft ids verified
  int64_t n_draft_accepted = 0;      ///< of those, emitted
  bool decoding() const { return prefilled == req.prompt.size(); }
  /// Bytes this sequence holds: state, drafter, verify records.
  uint64_t bytes() const {
    return seq.bytes() + (drafter ? drafter->bytes() : 0) + kda_steps.bytes() + kept_kda.bytes();
  }

  Slot(SeqRequest r, std::shared_ptr<SeqHandle> h, SequenceState s)
      : req(std::move(r)), handle(std::move(h)), seq(std::move(s)), sampler(req.sampling) {
    for (int32_t id : req.prompt) sampler.accept(id);  // llama.cpp's penalty history
  }
};

namespace {

/// log-softmax of row[0, n) at `id`, and the `top` most likely ids (ties to the lower id).
void fill_logprobs(std::span<const float> row, int32_t id, int top, SeqEvent& e) {
  double mx = -INFINITY;
  for (float v : row) mx = std::max(mx, static_cast<double>(v));
  double sum = 0;
  for (float v : row) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(sum);
  e.logprob = static_cast<float>(row[static_cast<size_t>(id)] - lse);
  if (top <= 0) return;
  std::vector<int32_t> idx(row.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
  const size_t k = std::min(idx.size(), static_cast<size_t>(top));
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(), [&](int32_t a, int32_t b) {
    return row[a] != row[b] ? row[a] > row[b] : a < b;
  });
  for (size_t i = 0; i < k; ++i) e.top.push_back({idx[i], static_cast<float>(row[idx[i]] - lse)});
}

/// The extra_json key of a slot state file (save_slot): {"slot": {"exact_resume": true}}.
constexpr const char* kSlotFileKey = "slot";

/// Positions where a state reached by the scheduler's prefill pieces is bit-identical to the
/// state of a one-pass prefill of any longer prompt are multiples of this: the KDA chunk (64)
/// when prefill_chunk is a multiple of it (KDA chunks split exactly there, the GEMMs and the
/// expanded MLA compute each row alone), else prefill_chunk itself (the one-pass piece grid).
int64_t exact_grain(int64_t chunk) { return chunk % 64 == 0 ? 64 : chunk; }

/// The furthest a prefill of an n-id prompt may resume from (PrefixCache::lookup's rule): a
/// resume that leaves exactly one id runs it alone (decode form: KDA decode step, absorbed MLA),
/// which equals the one-pass prefill only when n - 1 is on the prefill-chunk grid.
int64_t max_resume(int64_t n, int64_t chunk) { return n < 2 ? 0 : ((n - 1) % chunk == 0 ? n - 1 : n - 2); }

/// Where a kept slot state of an n-id prompt is cut: the prompt's end when it is on the exact
/// grain, else the last grain multiple a longer prompt may resume from. The ids fed after it
/// (the rest of the prompt, the decode-form generated ids) are recomputed by the next request.
int64_t exact_resume_point(int64_t n, int64_t chunk) {
  const int64_t g = exact_grain(chunk);
  return n % g == 0 ? n : (max_resume(n, chunk) / g) * g;
}

SeqEvent done_event(FinishReason why, const Scheduler::Options&, int64_t n_prompt, int64_t n_gen) {
  SeqEvent e;
  e.done = true;
  e.finish = why;
  e.n_prompt = n_prompt;
  e.n_generated = n_gen;
  e.time = std::chrono::steady_clock::now();
  return e;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Scheduler

Scheduler::Scheduler(const Model& model, Options opt) : model_(model), opt_(opt) {
  if (opt_.n_parallel < 1)
    throw Error("-np/--parallel: expected >= 1, found " + std::to_string(opt_.n_parallel));
  if (opt_.n_ctx < 2) throw Error("-c/--ctx-size: expected >= 2, found " + std::to_string(opt_.n_ctx));
  if (opt_.max_queue < 0) throw Error("--queue: expected >= 0, found " + std::to_string(opt_.max_queue));
  if (opt_.step_tokens < 1)
    throw Error("-b/--batch-size: expected >= 1 tokens per step, found " + std::to_string(opt_.step_tokens));
  if (opt_.speculation) {
    opt_.speculation->spec.validate();
    if (!opt_.speculation->make_drafter) throw Error("speculative decoding: no drafter factory (internal)");
  }
  kept_.resize(static_cast<size_t>(opt_.n_parallel));
  busy_.assign(static_cast<size_t>(opt_.n_parallel), false);
  thread_ = std::thread([this] { engine_loop(); });
}

Scheduler::~Scheduler() {
  shutdown(false);
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_thread_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t Scheduler::slot_bytes() const {
  const StateBytes sb = state_bytes(model_.config());
  uint64_t b = sb.total(opt_.n_ctx);
  if (opt_.speculation)  // one verify window of KDA records + the drafter's own state
    b += sb.kda_total * static_cast<uint64_t>(opt_.speculation->spec.draft_max + 1) + opt_.speculation->drafter_bytes;
  if (opt_.keep_slot_states) b += sb.kda_total;  // the KDA snapshot at the exact resume point
  return b;
}

std::shared_ptr<SeqHandle> Scheduler::submit(SeqRequest req) {
  const int64_t V = model_.config().vocab_size;
  const int64_t n = static_cast<int64_t>(req.prompt.size());
  if (n == 0) throw Error("prompt: empty (expected at least 1 token)");
  if (n >= opt_.n_ctx)
    throw Error("prompt is " + std::to_string(n) + " tokens, the context is " + std::to_string(opt_.n_ctx) +
                " tokens: the prompt must be shorter than the context");
  if (req.max_tokens < 1) throw Error("max_tokens: expected >= 1, found " + std::to_string(req.max_tokens));
  if (req.n_vocab < 0 || req.n_vocab > V)
    throw Error("n_vocab: expected [0, " + std::to_string(V) + "], found " + std::to_string(req.n_vocab));
  if (req.top_logprobs < -1 || req.top_logprobs > 20)
    throw Error("top_logprobs: expected 0..20, found " + std::to_string(req.top_logprobs));
  const int64_t nv = req.n_vocab > 0 ? req.n_vocab : V;
  for (size_t i = 0; i < req.prompt.size(); ++i)
    if (req.prompt[i] < 0 || req.prompt[i] >= nv)
      throw Error("prompt: token id " + std::to_string(req.prompt[i]) + " at position " + std::to_string(i) +
                  " outside [0, " + std::to_string(nv) + ")");
  for (int32_t id : req.forced_ids)
    if (id < 0 || id >= nv) throw Error("forced output: token id " + std::to_string(id) + " outside the vocabulary");
  req.sampling.validate();
  auto h = std::make_shared<SeqHandle>(std::chrono::steady_clock::now());
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!accepting_) throw Error("the server is shutting down");
    drop_cancelled_locked();  // a client that left while queued does not hold a place
    if (static_cast<int64_t>(queue_.size()) >= opt_.max_queue + std::max<int64_t>(0, opt_.n_parallel - stats_.running))
      throw QueueFullError("the queue is full (" + std::to_string(queue_.size()) + " requests waiting, --queue " +
                           std::to_string(opt_.max_queue) + "); retry later");
    queue_.push_back({std::move(req), h});
    stats_.waiting = static_cast<int64_t>(queue_.size());
  }
  cv_.notify_all();
  return h;
}

void Scheduler::shutdown(bool finish) {
  std::unique_lock<std::mutex> lk(mu_);
  accepting_ = false;
  if (!finish) cancel_all_ = true;
  cv_.notify_all();
  cv_.wait(lk, [&] { return queue_.empty() && stats_.running == 0; });
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void Scheduler::drop_cancelled_locked() {
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->handle->cancelled()) {
      it->handle->push(done_event(FinishReason::Cancelled, opt_, 0, 0));
      ++stats_.finished_total;
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  stats_.waiting = static_cast<int64_t>(queue_.size());
}

void Scheduler::engine_loop() {
  std::vector<std::unique_ptr<Slot>> slots;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_thread_ || !queue_.empty() || !slots.empty(); });
      if (stop_thread_ && queue_.empty() && slots.empty()) return;
      if (cancel_all_) {
        for (Pending& p : queue_) {
          p.handle->cancel();
          p.handle->push(done_event(FinishReason::Cancelled, opt_, 0, 0));
          ++stats_.finished_total;
        }
        queue_.clear();
        for (auto& s : slots) s->handle->cancel();
      }
      // Requests cancelled while waiting (client gone) end here, wherever they are in the queue.
      drop_cancelled_locked();
      // Admit queued requests into free slots (FIFO).
      while (static_cast<int64_t>(slots.size()) < opt_.n_parallel && !queue_.empty()) {
        Pending p = std::move(queue_.front());
        queue_.pop_front();
        try {
          SequenceState seq = model_.new_sequence();
          const int64_t chunk = model_.options().prefill_chunk;
          // The MLA caches will hold at most prompt + max_tokens rows (and never more than the
          // context): reserve them now, so that no row copy happens mid-generation; pages are
          // touched only as rows are written.
          const int64_t n_prompt = static_cast<int64_t>(p.req.prompt.size());
          const int64_t rows = n_prompt + std::min<int64_t>(p.req.max_tokens, opt_.n_ctx - n_prompt);
          seq.reserve(rows);
          // The slot id: the free one whose kept state the prompt extends the most, else a
          // free one keeping nothing, else the lowest free one.
          int64_t id = -1;
          size_t kept_len = 0;
          for (int64_t k = 0; k < opt_.n_parallel; ++k) {
            if (busy_[static_cast<size_t>(k)]) continue;
            const Kept& kp = kept_[static_cast<size_t>(k)];
            // A kept state is cut at an exact point (retire), so resuming there is bit-identical
            // to a one-pass prefill when the rest of the prompt is not a lone id the one-pass
            // prefill runs inside a longer piece.
            const bool extends = kp.state && kp.partition == p.req.cache_partition && !kp.ids.empty() &&
                                 static_cast<int64_t>(kp.ids.size()) <= max_resume(n_prompt, chunk) &&
                                 std::equal(kp.ids.begin(), kp.ids.end(), p.req.prompt.begin());
            if (extends && kp.ids.size() > kept_len) id = k, kept_len = kp.ids.size();
          }
          for (int64_t k = 0; id < 0 && k < opt_.n_parallel; ++k)
            if (!busy_[static_cast<size_t>(k)] && !kept_[static_cast<size_t>(k)].state) id = k;
          for (int64_t k = 0; id < 0 && k < opt_.n_parallel; ++k)
            if (!busy_[static_cast<size_t>(k)]) id = k;
          if (id < 0) throw Error("no free slot id (internal)");
          PrefixCache::Pin pin;
          int64_t reused = 0;
          std::vector<int64_t> cuts;
          bool from_kept = false;
          if (opt_.cache != nullptr) {
            reused = opt_.cache->lookup(p.req.prompt, &seq, &pin, p.req.cache_partition);
            cuts = opt_.cache->snapshot_points(n_prompt);
          }
          if (kept_len > static_cast<size_t>(reused)) {  // the slot's own sequence continues
            Kept& kp = kept_[static_cast<size_t>(id)];
            seq = std::move(*kp.state);
            kp = Kept{};
            seq.reserve(rows);
            pin.release();
            reused = static_cast<int64_t>(kept_len);
            from_kept = true;
          }
          // keep_slot_states: the prefill stops at the prompt's exact resume point, where the
          // KDA state is captured; retire() cuts the state back to it. The prefill before it is
          // exact only when it starts on the grain.
          int64_t kept_point = 0;
          if (opt_.keep_slot_states && reused % exact_grain(chunk) == 0) {
            kept_point = exact_resume_point(n_prompt, chunk);
            if (kept_point < reused) kept_point = 0;
            if (kept_point > 0 && kept_point < n_prompt) {
              cuts.push_back(kept_point);
              std::sort(cuts.begin(), cuts.end());
              cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
            }
          }
          auto slot = std::make_unique<Slot>(std::move(p.req), p.handle, std::move(seq));
          slot->prefilled = slot->reused = static_cast<size_t>(reused);
          slot->kept_point = kept_point;
          if (kept_point > 0 && kept_point == reused) slot->kept_kda = slot->seq.snapshot();
          slot->cuts = std::move(cuts);
          slot->pin = std::move(pin);
          slot->id = id;
          slot->from_kept = from_kept;
          if (opt_.speculation && slot->req.speculative) slot->drafter = opt_.speculation->make_drafter(slot->req);
          busy_[static_cast<size_t>(id)] = true;
          stats_.prompt_tokens_reused += static_cast<uint64_t>(reused);
          slots.push_back(std::move(slot));
        } catch (const std::exception& ex) {  // e.g. out of memory: this request fails, the rest go on
          SeqEvent e = done_event(FinishReason::Error, opt_, 0, 0);
          e.error = std::string("could not start the sequence: ") + ex.what();
          p.handle->push(std::move(e));
          ++stats_.finished_total;
        }
      }
      stats_.waiting = static_cast<int64_t>(queue_.size());
      stats_.running = static_cast<int64_t>(slots.size());
      if (slots.empty()) {
        cv_.notify_all();  // shutdown() may be waiting for the queue to drain
        continue;
      }
    }
    step(slots);
    {
      std::lock_guard<std::mutex> lk(mu_);
      stats_.running = static_cast<int64_t>(slots.size());
      uint64_t bytes = 0;
      for (const auto& s : slots) bytes += s->bytes();
      for (const Kept& k : kept_)
        if (k.state) bytes += k.state->bytes();
      stats_.state_bytes = bytes;
    }
    cv_.notify_all();
  }
}

void Scheduler::retire(Slot& s) {
  std::lock_guard<std::mutex> lk(mu_);
  busy_[static_cast<size_t>(s.id)] = false;
  // The slot holds the state of its last sequence or nothing: an earlier sequence's state never
  // outlives a later sequence that ran in the slot.
  kept_[static_cast<size_t>(s.id)] = Kept{};
  if (!opt_.keep_slot_states || s.seq.failed()) return;
  // The ids after the exact resume point were fed in pieces a one-pass prefill of a longer
  // prompt does not use (the prompt's tail, the generated ids in decode form): the kept state
  // is cut back to that point, so that a request extending it equals the request run alone.
  // A sequence that ended before reaching it keeps nothing.
  if (s.kept_kda.empty() || s.seq.n_past() < s.kept_point) return;
  try {
    s.seq.rollback_to(s.kept_kda, s.kept_point);
    s.seq.release_unused();
  } catch (const std::exception&) {  // e.g. out of memory: nothing is kept
    return;
  }
  Kept k;
  k.ids.assign(s.req.prompt.begin(), s.req.prompt.begin() + static_cast<std::ptrdiff_t>(s.kept_point));
  k.state = std::move(s.seq);
  k.partition = s.req.cache_partition;
  kept_[static_cast<size_t>(s.id)] = std::move(k);
}

Scheduler::SlotFileResult Scheduler::save_slot(int64_t id, const std::filesystem::path& file,
                                               const std::string& fingerprint) {
  if (id < 0 || id >= opt_.n_parallel)
    throw Error("slot id " + std::to_string(id) + " outside [0, " + std::to_string(opt_.n_parallel) + ")");
  if (!opt_.keep_slot_states) throw Error("slot states are not kept (start the server with --slot-save-path)");
  SequenceFileMeta meta;
  std::optional<SequenceState> copy;
  {
    std::lock_guard<std::mutex> lk(mu_);
    const Kept& k = kept_[static_cast<size_t>(id)];
    if (!k.state) throw Error("slot " + std::to_string(id) + " keeps no finished sequence to save");
    copy = *k.state;
    meta.ids = k.ids;
  }
  meta.fingerprint = fingerprint;
  meta.extra_json = nlohmann::json{{kSlotFileKey,
                                     {{"exact_resume", true}, {"grain", exact_grain(model_.options().prefill_chunk)}}}}
                        .dump();
  Timer t;
  copy->save(file, meta);  // a unique temporary file renamed onto `file`: concurrent saves never mix
  std::error_code ec;
  SlotFileResult r;
  r.n_tokens = copy->n_past();
  r.bytes = std::filesystem::file_size(file, ec);
  r.ms = t.ms();
  return r;
}

Scheduler::SlotFileResult Scheduler::restore_slot(int64_t id, const std::filesystem::path& file,
                                                  const std::string& fingerprint) {
  if (id < 0 || id >= opt_.n_parallel)
    throw Error("slot id " + std::to_string(id) + " outside [0, " + std::to_string(opt_.n_parallel) + ")");
  if (!opt_.keep_slot_states) throw Error("slot states are not kept (start the server with --slot-save-path)");
  Timer t;
  SequenceFileMeta meta;
  SequenceState st = SequenceState::load(file, model_.config(), &meta, fingerprint);
  if (static_cast<int64_t>(meta.ids.size()) != st.n_past())
    throw Error("sequence state '" + file.string() + "': holds no token ids (not saved by a slot or `k3 run`)");
  if (st.n_past() >= opt_.n_ctx)
    throw Error("sequence state '" + file.string() + "': " + std::to_string(st.n_past()) +
                " tokens do not fit the context of " + std::to_string(opt_.n_ctx));
  // Only a state cut at an exact resume point of this model's prefill grain (what save_slot
  // writes, with the grain it used) continues a request bit-identically to the request run
  // alone; a `k3 run` / `k3 chat` state, or a file without the mark, ends with ids fed in
  // decode form.
  const int64_t grain = exact_grain(model_.options().prefill_chunk);
  bool exact = false;
  try {
    const nlohmann::json extra = meta.extra_json.empty() ? nlohmann::json::object() : nlohmann::json::parse(meta.extra_json);
    exact = extra.is_object() && extra.contains(kSlotFileKey) && extra[kSlotFileKey].is_object() &&
            extra[kSlotFileKey].value("exact_resume", false) == true &&
            extra[kSlotFileKey].value("grain", int64_t{-1}) == grain;
  } catch (const std::exception&) {
    exact = false;
  }
  if (!exact || st.n_past() < 1 || st.n_past() % grain != 0)
    throw Error("sequence state '" + file.string() + "': not a slot state cut at an exact resume point of this " +
                "server's prefill grain of " + std::to_string(grain) + " tokens (a `k3 run` / `k3 chat` state, or " +
                "a slot file without that mark): a request extending it would not equal the request run alone; " +
                "save it from a slot with POST /slots/{id}?action=save");
  SlotFileResult r;
  r.n_tokens = st.n_past();
  std::error_code ec;
  r.bytes = std::filesystem::file_size(file, ec);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (busy_[static_cast<size_t>(id)]) throw Error("slot " + std::to_string(id) + " is running a request");
    kept_[static_cast<size_t>(id)] = Kept{std::move(meta.ids), std::move(st)};
  }
  r.ms = t.ms();
  return r;
}

Scheduler::SlotFileResult Scheduler::erase_slot(int64_t id) {
  if (id < 0 || id >= opt_.n_parallel)
    throw Error("slot id " + std::to_string(id) + " outside [0, " + std::to_string(opt_.n_parallel) + ")");
  if (!opt_.keep_slot_states) throw Error("slot states are not kept (start the server with --slot-save-path)");
  std::lock_guard<std::mutex> lk(mu_);
  SlotFileResult r;
  Kept& k = kept_[static_cast<size_t>(id)];
  r.n_tokens = k.state ? k.state->n_past() : 0;
  k = Kept{};
  return r;
}

std::vector<std::pair<bool, int64_t>> Scheduler::slot_summary() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::pair<bool, int64_t>> v;
  for (size_t k = 0; k < kept_.size(); ++k)
    v.push_back({busy_[k], kept_[k].state ? kept_[k].state->n_past() : 0});
  return v;
}

void Scheduler::step(std::vector<std::unique_ptr<Slot>>& slots) {
  uint64_t n_finished = 0, n_prompt_fed = 0, n_sampled = 0;
  uint64_t n_verifies = 0, n_drafted = 0, n_accepted = 0;
  auto finish = [&](size_t i, SeqEvent e) {
    e.n_drafted = slots[i]->n_drafted;
    e.n_draft_accepted = slots[i]->n_draft_accepted;
    retire(*slots[i]);
    slots[i]->handle->push(std::move(e));
    slots[i].reset();
    ++n_finished;
  };
  // 1. Cancellations seen since the last step free their slots.
  for (size_t i = 0; i < slots.size(); ++i)
    if (slots[i]->handle->cancelled())
      finish(i, done_event(FinishReason::Cancelled, opt_, static_cast<int64_t>(slots[i]->prefilled),
                           slots[i]->n_generated));
  std::erase(slots, nullptr);

  // 2. The batch: every decoding sequence's pending id (with its drafts when it speculates),
  // then prompt pieces under the budget.
  // A piece starts at a multiple of prefill_chunk from the prompt start and is cut by
  // forward_batch into prefill_chunk pieces, exactly as a lone prefill of the prompt is.
  const int64_t chunk = model_.options().prefill_chunk;
  const int64_t V = model_.config().vocab_size;
  int64_t budget = opt_.step_tokens;
  std::vector<BatchEntry> batch;
  std::vector<size_t> who;
  bool any_prefill = false;
  for (size_t i = 0; i < slots.size(); ++i) {
    Slot& s = *slots[i];
    if (!s.decoding()) continue;
    s.draft = {};
    if (s.drafter && s.forced_pos >= s.req.forced_ids.size()) propose_drafts(s);
    if (s.draft.ids.empty()) {
      batch.push_back({&s.seq, std::span<const int32_t>(&s.pending, 1), BatchLogits::Last});
    } else {
      s.window.assign(1, s.pending);
      s.window.insert(s.window.end(), s.draft.ids.begin(), s.draft.ids.end());
      BatchEntry e{&s.seq, s.window, BatchLogits::All};
      e.per_token = true;  // decode form: rows and states bit-identical to one-token steps
      e.kda_steps = &s.kda_steps;
      batch.push_back(e);
    }
    who.push_back(i);
    budget -= static_cast<int64_t>(batch.back().tokens.size());
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    Slot& s = *slots[i];
    if (s.decoding()) continue;
    const int64_t remaining = static_cast<int64_t>(s.req.prompt.size() - s.prefilled);
    int64_t n = remaining <= budget ? remaining : (std::max<int64_t>(budget, 0) / chunk) * chunk;
    // Prefill always progresses: the first prefilling sequence gets a piece even when the
    // decode rows took the whole budget.
    if (n == 0 && !any_prefill) n = std::min(chunk, remaining);
    if (n == 0) continue;
    // A piece ends at the next KDA snapshot point of the prefix cache (on the chunk grid when
    // the block size is a multiple of prefill_chunk), so the state there can be copied.
    for (int64_t c : s.cuts)
      if (c > static_cast<int64_t>(s.prefilled)) {
        n = std::min<int64_t>(n, c - static_cast<int64_t>(s.prefilled));
        break;
      }
    const bool last = n == remaining;
    batch.push_back({&s.seq, std::span<const int32_t>(s.req.prompt).subspan(s.prefilled, static_cast<size_t>(n)),
                     last ? BatchLogits::Last : BatchLogits::None});
    who.push_back(i);
    budget -= n;
    any_prefill = true;
  }
  if (batch.empty()) return;

  // 3. One forward for the whole batch.
  std::vector<std::vector<float>> logits;
  try {
    logits = model_.forward_batch(batch);
  } catch (const std::exception& ex) {
    for (size_t i : who) {
      SeqEvent e = done_event(FinishReason::Error, opt_, static_cast<int64_t>(slots[i]->prefilled),
                              slots[i]->n_generated);
      e.error = ex.what();
      finish(i, std::move(e));
    }
    std::erase(slots, nullptr);
    std::lock_guard<std::mutex> lk(mu_);
    stats_.finished_total += n_finished;
    ++stats_.steps_total;
    return;
  }

  // 4. Sample for every sequence that produced logits; stream the id or end the sequence.
  for (size_t b = 0; b < batch.size(); ++b) {
    Slot& s = *slots[who[b]];
    if (!s.decoding()) {
      s.prefilled += batch[b].tokens.size();
      n_prompt_fed += batch[b].tokens.size();
      if (s.kept_point > 0 && static_cast<int64_t>(s.prefilled) == s.kept_point) {
        try {
          s.kept_kda = s.seq.snapshot();
        } catch (const std::exception&) {  // e.g. out of memory: the slot keeps nothing
        }
      }
      if (opt_.cache != nullptr && !s.from_kept &&
          (s.prefilled % static_cast<size_t>(opt_.cache->options().block_tokens) == 0 || s.decoding())) {
        try {
          opt_.cache->store(std::span<const int32_t>(s.req.prompt).first(s.prefilled),
                            static_cast<int64_t>(s.req.prompt.size()), s.seq, &s.pin, s.req.cache_partition);
        } catch (const std::exception&) {  // e.g. out of memory: the cache is best effort
        }
      }
    }
    if (logits[b].empty()) continue;
    const int64_t nv = s.req.n_vocab > 0 ? s.req.n_vocab : V;
    const int64_t n_prompt = static_cast<int64_t>(s.req.prompt.size());
    auto is_stop = [&](int32_t id) {
      return std::find(s.req.stop_ids.begin(), s.req.stop_ids.end(), id) != s.req.stop_ids.end();
    };
    // The emitted ids and the logits row each was chosen from.
    const int64_t nd = static_cast<int64_t>(s.draft.ids.size());
    const int64_t n_after = s.seq.n_past();  // ids the state holds after the forward
    std::vector<int32_t> ids;
    std::vector<std::span<const float>> rows;
    for (int64_t r = 0; r <= nd; ++r)
      rows.emplace_back(logits[b].data() + r * V, static_cast<size_t>(nv));
    try {
      if (nd > 0) {
        ids = accept_drafts(s.sampler, rows, s.draft, is_stop);  // gives every id to sampler.accept
      } else {
        ids.push_back(s.forced_pos < s.req.forced_ids.size() ? s.req.forced_ids[s.forced_pos++]
                                                             : s.sampler.sample(rows[0]));
        s.sampler.accept(ids[0]);
      }
    } catch (const std::exception& ex) {  // e.g. no finite logit
      if (nd > 0) s.seq.mark_failed();  // holds unverified drafts: not kept
      SeqEvent d = done_event(FinishReason::Error, opt_, static_cast<int64_t>(s.prefilled), s.n_generated);
      d.error = ex.what();
      finish(who[b], std::move(d));
      continue;
    }
    // Stream the ids in order with plain decoding's checks: a stop id, max_tokens or the
    // context ends the sequence there and the rest of the run is discarded. Emitting ids[m]
    // means the state holds the window's first m + 1 ids (`keep`): n_after - nd + m ids.
    std::optional<SeqEvent> end;
    int64_t keep = 0;
    for (size_t m = 0; m < ids.size() && !end; ++m) {
      keep = static_cast<int64_t>(m) + 1;
      SeqEvent e;
      e.id = ids[m];
      if (s.req.top_logprobs >= 0) fill_logprobs(rows[m], e.id, s.req.top_logprobs, e);
      s.out.push_back(e.id);
      ++s.n_generated;
      ++n_sampled;
      if (nd > 0 && static_cast<int64_t>(m) < nd && e.id == s.draft.ids[m] &&
          (m + 1 < ids.size() || is_stop(e.id)))
        ++s.n_draft_accepted, ++n_accepted;  // an accepted draft (the last id is the target's own, unless a stop)
      e.time = std::chrono::steady_clock::now();
      if (is_stop(e.id)) {
        SeqEvent d = done_event(FinishReason::Stop, opt_, n_prompt, s.n_generated);
        d.stop_id = e.id;
        d.logprob = e.logprob;
        d.top = std::move(e.top);
        end = std::move(d);
        break;
      }
      const int32_t id = e.id;
      s.handle->push(std::move(e));
      // generate()'s order: the id is streamed, then the context and the length limits end it.
      if (s.n_generated >= s.req.max_tokens || n_after - nd + static_cast<int64_t>(m) + 1 >= opt_.n_ctx) {
        end = done_event(FinishReason::Length, opt_, n_prompt, s.n_generated);
        break;
      }
      s.pending = id;
    }
    if (nd > 0) {
      ++n_verifies;
      s.n_drafted += nd;
      n_drafted += static_cast<uint64_t>(nd);
      try {
        if (keep < nd + 1) s.seq.rollback_to(s.kda_steps, s.kda_steps.first() + keep - 1);
      } catch (const std::exception& ex) {  // an inconsistent step log (internal): end only this sequence
        s.seq.mark_failed();                // its state is not kept
        end = done_event(FinishReason::Error, opt_, n_prompt, s.n_generated);
        end->error = std::string("speculative rollback: ") + ex.what();
      }
    }
    if (end) finish(who[b], std::move(*end));
  }
  std::erase(slots, nullptr);
  std::lock_guard<std::mutex> lk(mu_);
  stats_.finished_total += n_finished;
  stats_.prompt_tokens_total += n_prompt_fed;
  stats_.generated_tokens_total += n_sampled;
  stats_.spec_verifies_total += n_verifies;
  stats_.spec_drafted_total += n_drafted;
  stats_.spec_accepted_total += n_accepted;
  ++stats_.steps_total;
}

void Scheduler::propose_drafts(Slot& s) {
  const Options::Speculation& sp = *opt_.speculation;
  const int64_t n_past0 = s.seq.n_past();
  // Caps (as Speculator::decode): the emitted ids (<= k + 1) stay within max_tokens, the fed
  // window within the context and one decode-form piece.
  const int64_t k = std::min<int64_t>({sp.spec.draft_max, s.req.max_tokens - s.n_generated - 1,
                                       opt_.n_ctx - 2 - n_past0, model_.options().prefill_chunk - 1});
  if (k < std::max<int64_t>(1, sp.spec.draft_min)) return;
  // The drafter's context: every id the state holds, then the pending id (the last of out).
  std::vector<int32_t> ctx(s.req.prompt.begin(), s.req.prompt.end());
  ctx.insert(ctx.end(), s.out.begin(), s.out.end());
  try {
    s.draft = s.drafter->propose(ctx, k);
  } catch (const std::exception&) {  // e.g. the draft model's state failed: decode plainly from now on
    s.drafter.reset();
    s.draft = {};
    return;
  }
  const int64_t nv = s.req.n_vocab > 0 ? s.req.n_vocab : model_.config().vocab_size;
  size_t n = std::min(s.draft.ids.size(), static_cast<size_t>(k));
  for (size_t j = 0; j < n; ++j)
    if (s.draft.ids[j] < 0 || s.draft.ids[j] >= nv) n = j;  // a draft stops at an id outside the vocabulary
  s.draft.ids.resize(n);
  if (!s.draft.q.empty()) s.draft.q.resize(n);
  if (static_cast<int64_t>(n) < sp.spec.draft_min) s.draft = {};
}

}  // namespace k3
