// Scheduler admission (scheduler.h): a popped request gets a slot id (under the lock), a state
// (allocated, resumed from the prefix cache or the slot's kept state, reserved: outside the
// lock) and a Slot; a finished sequence leaves its state to the slot (retire, kept slot
// states), which save_slot / restore_slot / erase_slot write, read and drop.
#include <algorithm>
#include <atomic>
#include <exception>
#include <utility>

#include <nlohmann/json.hpp>

#include "model/sequence_state.h"
#include "runtime/scheduler_slot.h"
#include "runtime/stats.h"

namespace k3 {

void Scheduler::admit(Pending p, std::vector<std::unique_ptr<Slot>>& slots) {
  const PrefillGrid grid = model_.prefill_grid();
  const int64_t n_prompt = static_cast<int64_t>(p.req.prompt.size());
  int64_t id = -1;
  try {
    // The slot id: the free one whose kept state the prompt extends the most, else a free one
    // keeping nothing, else the lowest free one. Chosen and marked busy under the lock.
    size_t kept_len = 0;
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (int64_t k = 0; k < opt_.n_parallel; ++k) {
        if (busy_[static_cast<size_t>(k)]) continue;
        const Kept& kp = kept_[static_cast<size_t>(k)];
        // A kept state is cut at an exact point (retire), so resuming there is bit-identical
        // to a one-pass prefill when the rest of the prompt is not a lone id the one-pass
        // prefill runs inside a longer piece.
        const bool extends = kp.state && !p.req.images && kp.partition == p.req.cache_partition && !kp.ids.empty() &&
                             static_cast<int64_t>(kp.ids.size()) <= grid.max_resume(n_prompt) &&
                             std::equal(kp.ids.begin(), kp.ids.end(), p.req.prompt.begin());
        if (extends && kp.ids.size() > kept_len) id = k, kept_len = kp.ids.size();
      }
      for (int64_t k = 0; id < 0 && k < opt_.n_parallel; ++k)
        if (!busy_[static_cast<size_t>(k)] && !kept_[static_cast<size_t>(k)].state) id = k;
      for (int64_t k = 0; id < 0 && k < opt_.n_parallel; ++k)
        if (!busy_[static_cast<size_t>(k)]) id = k;
      if (id < 0) throw Error("no free slot id (internal)");
      busy_[static_cast<size_t>(id)] = true;
    }
    // Outside the lock: the allocation, the prefix-cache resume (a state copy) and the reserve.
    SequenceState seq = model_.new_sequence();
    // The MLA caches will hold at most prompt + max_tokens rows (and never more than the
    // context): reserve them now, so that no row copy happens mid-generation; pages are
    // touched only as rows are written.
    const int64_t rows = n_prompt + std::min<int64_t>(p.req.max_tokens, opt_.n_ctx - n_prompt);
    seq.reserve(rows);
    PrefixCache::Pin pin;
    int64_t reused = 0;
    std::vector<int64_t> cuts;
    bool from_kept = false;
    if (opt_.cache != nullptr) {
      reused = opt_.cache->lookup(p.req.prompt, &seq, &pin, p.req.cache_partition,
                                  p.req.images ? p.req.images->media_keys() : std::vector<MediaKey>{});
      cuts = opt_.cache->snapshot_points(n_prompt);
    }
    if (kept_len > static_cast<size_t>(reused)) {  // the slot's own sequence continues
      std::shared_ptr<SequenceState> kept;
      {
        std::lock_guard<std::mutex> lk(mu_);
        Kept& kp = kept_[static_cast<size_t>(id)];
        if (kp.state && kp.ids.size() == kept_len) {  // not erased meanwhile (erase_slot)
          kept = std::move(kp.state);
          kp = Kept{};
        }
      }
      if (kept) {
        // A save_slot() that still writes the state shares it: copy instead of moving.
        if (kept.use_count() == 1) {
          // The last owner: a save_slot() that held it has released it; its reads of the state
          // happen before this move (use_count() is a relaxed load).
          std::atomic_thread_fence(std::memory_order_acquire);
          seq = std::move(*kept);
        } else {
          seq = *kept;
        }
        kept.reset();
        seq.reserve(rows);
        pin.release();
        reused = static_cast<int64_t>(kept_len);
        from_kept = true;
      }
    }
    // keep_slot_states: the prefill stops at the prompt's exact resume point, where the KDA
    // state is captured; retire() cuts the state back to it. The prefill before it is exact
    // only when it starts on the grain.
    int64_t kept_point = 0;
    if (opt_.keep_slot_states && reused % grid.exact_grain() == 0) {
      kept_point = grid.resume_point(n_prompt);
      if (kept_point < reused) kept_point = 0;
      if (kept_point > 0 && kept_point < n_prompt) {
        cuts.push_back(kept_point);
        std::sort(cuts.begin(), cuts.end());
        cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
      }
    }
    DecodeLimits lim;
    lim.max_tokens = p.req.max_tokens;
    lim.n_ctx = opt_.n_ctx;
    lim.n_vocab = p.req.n_vocab > 0 ? p.req.n_vocab : model_.config().vocab_size;
    lim.stop_ids = p.req.stop_ids;
    auto slot = std::make_unique<Slot>(std::move(p.req), p.handle, std::move(seq), std::move(lim), grid);
    slot->prefilled = slot->reused = static_cast<size_t>(reused);
    slot->kept_point = kept_point;
    if (kept_point > 0 && kept_point == reused) slot->kept_kda = slot->seq.snapshot();
    slot->cuts = std::move(cuts);
    slot->pin = std::move(pin);
    slot->id = id;
    slot->from_kept = from_kept;
    if (opt_.speculation && slot->req.speculative) slot->drafter = opt_.speculation->make_drafter(slot->req);
    {
      std::lock_guard<std::mutex> lk(mu_);
      stats_.prompt_tokens_reused += static_cast<uint64_t>(reused);
    }
    slots.push_back(std::move(slot));
  } catch (const std::exception& ex) {  // e.g. out of memory: this request fails, the rest go on
    SeqEvent e = done_event(FinishReason::Error, 0, 0);
    e.error = std::string("could not start the sequence: ") + ex.what();
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (id >= 0) busy_[static_cast<size_t>(id)] = false;
      ++stats_.finished_total;
    }
    p.handle->push(std::move(e));
  }
}

void Scheduler::retire(Slot& s) {
  // The slot holds the state of its last sequence or nothing: an earlier sequence's state never
  // outlives a later sequence that ran in the slot.
  Kept k;
  // The ids after the exact resume point were fed in pieces a one-pass prefill of a longer
  // prompt does not use (the prompt's tail, the generated ids in decode form): the kept state
  // is cut back to that point (outside the lock), so that a request extending it equals the
  // request run alone. A sequence that ended before reaching it keeps nothing.
  if (opt_.keep_slot_states && !s.req.images && !s.seq.failed() && !s.kept_kda.empty() && s.seq.n_past() >= s.kept_point) {
    try {
      s.seq.rollback_to(s.kept_kda, s.kept_point);
      s.seq.release_unused();
      k.ids.assign(s.req.prompt.begin(), s.req.prompt.begin() + static_cast<std::ptrdiff_t>(s.kept_point));
      k.state = std::make_shared<SequenceState>(std::move(s.seq));
      k.partition = s.req.cache_partition;
    } catch (const std::exception& ex) {  // e.g. out of memory: nothing is kept
      k = Kept{};
      absorbed("scheduler: slot " + std::to_string(s.id) + " keeps no state (cutting it failed: " + ex.what() + ")");
    }
  }
  Kept old;  // the slot's earlier kept state, freed outside the lock
  std::lock_guard<std::mutex> lk(mu_);
  busy_[static_cast<size_t>(s.id)] = false;
  old = std::exchange(kept_[static_cast<size_t>(s.id)], std::move(k));
}

Scheduler::SlotFileResult Scheduler::save_slot(int64_t id, const std::filesystem::path& file,
                                               const std::string& fingerprint) {
  if (grouped()) return queue_slot_op(StepPlan::SlotOp::Save, id, file, fingerprint);
  return save_slot_here(id, file, fingerprint);
}

Scheduler::SlotFileResult Scheduler::restore_slot(int64_t id, const std::filesystem::path& file,
                                                  const std::string& fingerprint) {
  if (grouped()) return queue_slot_op(StepPlan::SlotOp::Restore, id, file, fingerprint);
  return restore_slot_here(id, file, fingerprint);
}

Scheduler::SlotFileResult Scheduler::erase_slot(int64_t id) {
  if (grouped()) return queue_slot_op(StepPlan::SlotOp::Erase, id, {}, {});
  return erase_slot_here(id);
}

Scheduler::SlotFileResult Scheduler::queue_slot_op(int kind, int64_t id, const std::filesystem::path& file,
                                                   const std::string& fingerprint) {
  if (opt_.group->rank() != 0) throw Error("/slots: called on rank " + std::to_string(opt_.group->rank()) + " (internal)");
  auto c = std::make_shared<SlotCommand>();
  c->op.kind = static_cast<StepPlan::SlotOp::Kind>(kind);
  c->op.id = id;
  c->op.file = file.string();
  c->op.fingerprint = fingerprint;
  std::future<SlotFileResult> f = c->result.get_future();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_thread_ || stopped_) throw Error("the server is shutting down");
    commands_.push_back(std::move(c));
  }
  cv_.notify_all();
  return f.get();
}

Scheduler::SlotFileResult Scheduler::run_slot_op(int kind, int64_t id, const std::string& file,
                                                 const std::string& fingerprint) {
  SlotFileResult r;
  std::string err;
  try {
    switch (kind) {
      case StepPlan::SlotOp::Save: r = save_slot_here(id, model_.state_file(file), fingerprint); break;
      case StepPlan::SlotOp::Restore: r = restore_slot_here(id, model_.state_file(file), fingerprint); break;
      default: r = erase_slot_here(id); break;
    }
  } catch (const std::exception& ex) {
    err = ex.what();
    if (err.empty()) err = "failed";
  }
  if (!grouped()) {
    if (!err.empty()) throw Error(err);
    return r;
  }
  // Every rank learns every rank's error: the same decision everywhere.
  Comm& c = *opt_.group;
  const size_t n = static_cast<size_t>(c.size());
  const int64_t len = static_cast<int64_t>(err.size());
  std::vector<int64_t> lens(n);
  c.allgatherv(&len, std::vector<int64_t>(n, 8), lens.data());
  int64_t total = 0;
  for (int64_t l : lens) total += l;
  std::string all(static_cast<size_t>(total), '\0');
  c.allgatherv(err.data(), lens, all.data());
  std::string first;
  int64_t off = 0, failed = 0;
  for (size_t k = 0; k < n; ++k) {
    if (lens[k] > 0) {
      ++failed;
      if (first.empty()) first = (n > 1 && k > 0 ? "rank " + std::to_string(k) + ": " : "") + all.substr(static_cast<size_t>(off), static_cast<size_t>(lens[k]));
    }
    off += lens[k];
  }
  if (failed == 0) return r;
  // A restore that only some ranks made leaves the slot keeping nothing on every rank.
  if (kind == StepPlan::SlotOp::Restore && failed < static_cast<int64_t>(n)) erase_slot_here(id);
  throw Error(first);
}

Scheduler::SlotFileResult Scheduler::save_slot_here(int64_t id, const std::filesystem::path& file,
                                                    const std::string& fingerprint) {
  if (id < 0 || id >= opt_.n_parallel)
    throw Error("slot id " + std::to_string(id) + " outside [0, " + std::to_string(opt_.n_parallel) + ")");
  if (!opt_.keep_slot_states) throw Error("slot states are not kept (start the server with --slot-save-path)");
  SequenceFileMeta meta;
  std::shared_ptr<const SequenceState> state;  // shared, not copied: written outside the lock
  {
    std::lock_guard<std::mutex> lk(mu_);
    const Kept& k = kept_[static_cast<size_t>(id)];
    if (!k.state) throw Error("slot " + std::to_string(id) + " keeps no finished sequence to save");
    state = k.state;
    meta.ids = k.ids;
  }
  meta.fingerprint = fingerprint;
  meta.extra_json =
      nlohmann::json{{kSlotFileKey, {{"exact_resume", true}, {"grain", model_.prefill_grid().exact_grain()}}}}.dump();
  Timer t;
  state->save(file, meta);  // a unique temporary file renamed onto `file`: concurrent saves never mix
  std::error_code ec;
  SlotFileResult r;
  r.n_tokens = state->n_past();
  r.bytes = std::filesystem::file_size(file, ec);
  r.ms = t.ms();
  return r;
}

Scheduler::SlotFileResult Scheduler::restore_slot_here(int64_t id, const std::filesystem::path& file,
                                                       const std::string& fingerprint) {
  if (id < 0 || id >= opt_.n_parallel)
    throw Error("slot id " + std::to_string(id) + " outside [0, " + std::to_string(opt_.n_parallel) + ")");
  if (!opt_.keep_slot_states) throw Error("slot states are not kept (start the server with --slot-save-path)");
  Timer t;
  SequenceFileMeta meta;
  SequenceState st = model_.load_sequence(file, &meta, fingerprint);
  if (static_cast<int64_t>(meta.ids.size()) != st.n_past())
    throw Error("sequence state '" + file.string() + "': holds no token ids (not saved by a slot or `k3 run`)");
  if (st.n_past() >= opt_.n_ctx)
    throw Error("sequence state '" + file.string() + "': " + std::to_string(st.n_past()) +
                " tokens do not fit the context of " + std::to_string(opt_.n_ctx));
  // Only a state cut at an exact resume point of this model's prefill grain (what save_slot
  // writes, with the grain it used) continues a request bit-identically to the request run
  // alone; a `k3 run` / `k3 chat` state, or a file without the mark, ends with ids fed in
  // decode form.
  const PrefillGrid grid = model_.prefill_grid();
  const int64_t grain = grid.exact_grain();
  bool exact = false;
  try {
    const nlohmann::json extra =
        meta.extra_json.empty() ? nlohmann::json::object() : nlohmann::json::parse(meta.extra_json);
    exact = extra.is_object() && extra.contains(kSlotFileKey) && extra[kSlotFileKey].is_object() &&
            extra[kSlotFileKey].value("exact_resume", false) == true &&
            extra[kSlotFileKey].value("grain", int64_t{-1}) == grain;
  } catch (const std::exception&) {
    exact = false;
  }
  if (!exact || !grid.is_exact_resume(st.n_past()))
    throw Error("sequence state '" + file.string() + "': not a slot state cut at an exact resume point of this " +
                "server's prefill grain of " + std::to_string(grain) + " tokens (a `k3 run` / `k3 chat` state, or " +
                "a slot file without that mark): a request extending it would not equal the request run alone; " +
                "save it from a slot with POST /slots/{id}?action=save");
  SlotFileResult r;
  r.n_tokens = st.n_past();
  std::error_code ec;
  r.bytes = std::filesystem::file_size(file, ec);
  auto kept = std::make_shared<SequenceState>(std::move(st));
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (busy_[static_cast<size_t>(id)]) throw Error("slot " + std::to_string(id) + " is running a request");
    kept_[static_cast<size_t>(id)] = Kept{std::move(meta.ids), std::move(kept)};
  }
  r.ms = t.ms();
  return r;
}

Scheduler::SlotFileResult Scheduler::erase_slot_here(int64_t id) {
  if (id < 0 || id >= opt_.n_parallel)
    throw Error("slot id " + std::to_string(id) + " outside [0, " + std::to_string(opt_.n_parallel) + ")");
  if (!opt_.keep_slot_states) throw Error("slot states are not kept (start the server with --slot-save-path)");
  Kept old;  // freed outside the lock
  SlotFileResult r;
  {
    std::lock_guard<std::mutex> lk(mu_);
    old = std::exchange(kept_[static_cast<size_t>(id)], Kept{});
  }
  r.n_tokens = old.state ? old.state->n_past() : 0;
  return r;
}

std::vector<std::pair<bool, int64_t>> Scheduler::slot_summary() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::pair<bool, int64_t>> v;
  for (size_t k = 0; k < kept_.size(); ++k) v.push_back({busy_[k], kept_[k].state ? kept_[k].state->n_past() : 0});
  return v;
}

}  // namespace k3
