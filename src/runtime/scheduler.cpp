// Continuous batching (scheduler.h): the request queue, the engine thread's loop and one step.
// Admission and kept slot states: scheduler_admission.cpp; the batch: scheduler_batch.cpp.
#include "runtime/scheduler.h"

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <exception>
#include <future>

#include "io/model_summary.h"
#include "model/sequence_state.h"
#include "runtime/scheduler_slot.h"
#include "runtime/step_plan.h"

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
// Events

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
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(),
                    [&](int32_t a, int32_t b) { return row[a] != row[b] ? row[a] > row[b] : a < b; });
  for (size_t i = 0; i < k; ++i) e.top.push_back({idx[i], static_cast<float>(row[idx[i]] - lse)});
}

SeqEvent done_event(FinishReason why, int64_t n_prompt, int64_t n_gen) {
  SeqEvent e;
  e.done = true;
  e.finish = why;
  e.n_prompt = n_prompt;
  e.n_generated = n_gen;
  e.time = std::chrono::steady_clock::now();
  return e;
}

// ---------------------------------------------------------------------------------------------
// Scheduler

Scheduler::Scheduler(const Model& model, Options opt) : model_(model), opt_(opt) {
  if (opt_.n_parallel < 1) throw Error("-np/--parallel: expected >= 1, found " + std::to_string(opt_.n_parallel));
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
  if (grouped() && opt_.group->rank() != 0) accepting_ = false;  // requests arrive in rank 0's plans
  thread_ = std::thread([this] {
    if (grouped() && opt_.group->rank() != 0) follower_loop();
    else engine_loop();
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
  });
}

void Scheduler::wait_stopped() {
  if (!grouped() || opt_.group->rank() == 0) return;
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return stopped_; });
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
  const StateBytes sb = state_bytes(model_.config(), model_.options().mla_cache);  // --cache-type rows
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
  if (req.images) {
    const ImagePrompt& ip = *req.images;
    if (ip.ids != req.prompt) throw Error("images: the image prompt's ids are not the request's prompt");
    if (ip.hidden != model_.config().hidden_size)
      throw Error("images: rows of width " + std::to_string(ip.hidden) + ", the model's hidden_size is " +
                  std::to_string(model_.config().hidden_size));
    for (const MediaSpan& m : ip.media)
      if (m.image < 0 || static_cast<size_t>(m.image) >= ip.rows.size() ||
          ip.rows[static_cast<size_t>(m.image)].size() != static_cast<size_t>(m.n * ip.hidden))
        throw Error("images: image " + std::to_string(m.image) + " has no rows for its " + std::to_string(m.n) +
                    " positions");
  }
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
  cv_.wait(lk, [&] { return stopped_ || (queue_.empty() && stats_.running == 0); });
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void Scheduler::drop_cancelled_locked() {
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->handle->cancelled()) {
      it->handle->push(done_event(FinishReason::Cancelled, 0, 0));
      ++stats_.finished_total;
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  stats_.waiting = static_cast<int64_t>(queue_.size());
}

void Scheduler::absorbed(const std::string& what) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.absorbed_errors_total;
  }
  if (opt_.log) opt_.log(what);
}

void Scheduler::engine_loop() {
  std::vector<std::unique_ptr<Slot>> slots;
  std::vector<Pending> admitting;
  for (;;) {
    std::deque<std::shared_ptr<SlotCommand>> commands;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_thread_ || !queue_.empty() || !slots.empty() || !commands_.empty(); });
      if (stop_thread_ && queue_.empty() && slots.empty() && commands_.empty()) {
        lk.unlock();
        if (grouped()) {
          StepPlan stop;
          stop.stop = true;
          try {
            broadcast_plan(*opt_.group, stop);
          } catch (const std::exception& ex) {
            group_fail(std::string("scheduler: the stop plan did not reach the ranks: ") + ex.what());
          }
        }
        return;
      }
      if (cancel_all_) {
        for (Pending& p : queue_) {
          p.handle->cancel();
          p.handle->push(done_event(FinishReason::Cancelled, 0, 0));
          ++stats_.finished_total;
        }
        queue_.clear();
        for (auto& s : slots) s->handle->cancel();
      }
      // Requests cancelled while waiting (client gone) end here, wherever they are in the queue.
      drop_cancelled_locked();
      // Queued requests for the free slots (FIFO); admit() starts them outside the lock.
      while (static_cast<int64_t>(slots.size() + admitting.size()) < opt_.n_parallel && !queue_.empty()) {
        admitting.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      commands.swap(commands_);
      stats_.waiting = static_cast<int64_t>(queue_.size());
      stats_.running = static_cast<int64_t>(slots.size() + admitting.size());
    }
    // The cancellations this step acts on, read once (a client may cancel at any time).
    for (auto& s : slots) s->cancel_seen = s->handle->cancelled();
    if (grouped()) {  // the plan of this step for the other ranks
      StepPlan plan;
      for (const Pending& p : admitting) plan.admit.push_back(p.req);
      for (const auto& s : slots)
        if (s->cancel_seen) plan.cancel.push_back(s->id);
      for (const auto& c : commands) plan.slot_ops.push_back(c->op);
      try {
        broadcast_plan(*opt_.group, plan);
      } catch (const std::exception& ex) {
        group_fail(std::string("scheduler: the step plan did not reach the ranks: ") + ex.what());
      }
    }
    for (const auto& c : commands) {
      try {
        c->result.set_value(run_slot_op(c->op.kind, c->op.id, c->op.file, c->op.fingerprint));
      } catch (...) {
        c->result.set_exception(std::current_exception());
      }
    }
    for (Pending& p : admitting) admit(std::move(p), slots);
    admitting.clear();
    if (slots.empty()) {
      {
        std::lock_guard<std::mutex> lk(mu_);
        stats_.running = 0;
      }
      cv_.notify_all();  // shutdown() may be waiting for the queue to drain
      continue;
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

void Scheduler::follower_loop() {
  std::vector<std::unique_ptr<Slot>> slots;
  for (;;) {
    StepPlan plan;
    try {
      broadcast_plan(*opt_.group, plan);
    } catch (const std::exception& ex) {
      group_fail(std::string("scheduler: no step plan from rank 0: ") + ex.what());
    }
    if (plan.stop) {
      if (!slots.empty()) group_fail("scheduler: rank 0 stopped while this rank still runs sequences (internal)");
      return;
    }
    for (auto& s : slots)
      s->cancel_seen = std::find(plan.cancel.begin(), plan.cancel.end(), s->id) != plan.cancel.end();
    for (const StepPlan::SlotOp& op : plan.slot_ops) {
      try {
        run_slot_op(op.kind, op.id, op.file, op.fingerprint);
      } catch (const std::exception&) {  // rank 0 answers the request with the error
      }
    }
    for (SeqRequest& r : plan.admit) {
      if (!r.constraint_spec.empty()) {
        try {
          if (opt_.constraints == nullptr) throw Error("this rank has no constraint compiler");
          r.constraint = opt_.constraints->compile(r.constraint_spec);
        } catch (const std::exception& ex) {
          group_fail(std::string("scheduler: compiling a request's constraint: ") + ex.what());
        }
      }
      admit(Pending{std::move(r), std::make_shared<SeqHandle>(std::chrono::steady_clock::now())}, slots);
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      stats_.running = static_cast<int64_t>(slots.size());
    }
    if (!slots.empty()) step(slots);
  }
}

void Scheduler::group_fail(const std::string& what) {
  if (opt_.log) opt_.log(what + " (rank " + std::to_string(opt_.group->rank()) + "; ending every rank)");
  std::fprintf(stderr, "k3: rank %d: %s: ending every rank\n", opt_.group->rank(), what.c_str());
  if (opt_.group_failed) opt_.group_failed(what);
  opt_.group->abort(1);
  std::abort();  // Comm::abort does not return; this keeps [[noreturn]] true for the compiler too
}

void Scheduler::check_same_batch(const std::vector<std::unique_ptr<Slot>>& slots,
                                 const std::vector<BatchEntry>& batch, const std::vector<size_t>& who) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xffu;
      h *= 1099511628211ull;
    }
  };
  mix(batch.size());
  for (size_t b = 0; b < batch.size(); ++b) {
    mix(static_cast<uint64_t>(slots[who[b]]->id));
    mix(static_cast<uint64_t>(batch[b].seq->n_past()));
    mix(batch[b].tokens.size());
    for (int32_t id : batch[b].tokens) mix(static_cast<uint32_t>(id));
    mix(static_cast<uint64_t>(batch[b].logits));
    mix(batch[b].per_token ? 1 : 0);
  }
  Comm& c = *opt_.group;
  std::vector<uint64_t> all(static_cast<size_t>(c.size()));
  try {
    c.allgatherv(&h, std::vector<int64_t>(static_cast<size_t>(c.size()), 8), all.data());
  } catch (const std::exception& ex) {
    group_fail(std::string("scheduler: the batch check failed: ") + ex.what());
  }
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0])
      group_fail("scheduler: rank " + std::to_string(r) +
                 "'s engine step differs from rank 0's (sequences, positions or ids): the ranks no longer run the "
                 "same batch");
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
    if (slots[i]->cancel_seen)
      finish(i, done_event(FinishReason::Cancelled, static_cast<int64_t>(slots[i]->prefilled), slots[i]->n_generated));
  std::erase(slots, nullptr);

  // 2. The batch (scheduler_batch.cpp).
  std::vector<BatchEntry> batch;
  std::vector<size_t> who;
  build_batch(slots, batch, who);
  if (grouped()) check_same_batch(slots, batch, who);
  if (batch.empty()) return;

  // 3. One forward for the whole batch.
  std::vector<std::vector<float>> logits;
  try {
    logits = model_.forward_batch(batch);
  } catch (const std::exception& ex) {
    // Under N ranks a forward that failed on one rank left the sequence of collectives.
    if (grouped()) group_fail(std::string("scheduler: the forward failed: ") + ex.what());
    for (size_t i : who) {
      SeqEvent e = done_event(FinishReason::Error, static_cast<int64_t>(slots[i]->prefilled), slots[i]->n_generated);
      e.error = ex.what();
      finish(i, std::move(e));
    }
    std::erase(slots, nullptr);
    std::lock_guard<std::mutex> lk(mu_);
    stats_.finished_total += n_finished;
    ++stats_.steps_total;
    return;
  }

  // 4. Every sequence that produced logits goes through its SequenceDecoder: the ids are
  // picked (sampled, forced, or accepted drafts), streamed under the stop / length / context
  // rules, and a verify window is rolled back to the emitted ids.
  const int64_t V = model_.config().vocab_size;
  for (size_t b = 0; b < batch.size(); ++b) {
    Slot& s = *slots[who[b]];
    if (!s.decoding()) {
      s.prefilled += batch[b].tokens.size();
      n_prompt_fed += batch[b].tokens.size();
      if (s.kept_point > 0 && static_cast<int64_t>(s.prefilled) == s.kept_point) {
        try {
          s.kept_kda = s.seq.snapshot();
        } catch (const std::exception& ex) {  // e.g. out of memory: the slot keeps nothing
          absorbed("scheduler: slot " + std::to_string(s.id) + " keeps no state (the KDA capture failed: " + ex.what() +
                   ")");
        }
      }
      if (opt_.cache != nullptr && !s.from_kept &&
          (s.prefilled % static_cast<size_t>(opt_.cache->options().block_tokens) == 0 || s.decoding())) {
        try {
          opt_.cache->store(std::span<const int32_t>(s.req.prompt).first(s.prefilled),
                            static_cast<int64_t>(s.req.prompt.size()), s.seq, &s.pin, s.req.cache_partition,
                            s.media);
        } catch (const std::exception& ex) {  // e.g. out of memory: the cache is best effort
          absorbed(std::string("scheduler: prefix-cache store failed (the blocks are not cached): ") + ex.what());
        }
      }
    }
    if (logits[b].empty()) continue;
    const int64_t nv = s.decoder.limits().n_vocab;
    const int64_t n_prompt = static_cast<int64_t>(s.req.prompt.size());
    const int64_t nd = static_cast<int64_t>(s.draft.ids.size());
    std::vector<std::span<const float>> rows;
    for (int64_t r = 0; r <= nd; ++r) rows.emplace_back(logits[b].data() + r * V, static_cast<size_t>(nv));
    const int32_t* forced =
        nd == 0 && s.forced_pos < s.req.forced_ids.size() ? &s.req.forced_ids[s.forced_pos] : nullptr;
    // Each streamed id is an event with its logprobs; it becomes the pending id.
    const EmitFn emit = [&](int32_t id, size_t m) {
      SeqEvent e;
      e.id = id;
      if (s.req.top_logprobs >= 0) fill_logprobs(rows[m], id, s.req.top_logprobs, e);
      e.time = std::chrono::steady_clock::now();
      s.handle->push(std::move(e));
      s.pending = id;
      return true;
    };
    DecodeStep st;
    try {
      st = s.decoder.step(s.sampler, rows, s.draft, s.seq.n_past(), emit, forced,
                             s.constraint ? &*s.constraint : nullptr);
    } catch (const std::exception& ex) {  // e.g. no finite logit
      if (nd > 0) s.seq.mark_failed();    // holds unverified drafts: not kept
      SeqEvent d = done_event(FinishReason::Error, static_cast<int64_t>(s.prefilled), s.n_generated);
      d.error = ex.what();
      finish(who[b], std::move(d));
      continue;
    }
    if (forced != nullptr) ++s.forced_pos;
    s.out.insert(s.out.end(), st.ids.begin(), st.ids.begin() + st.n_emitted);
    s.n_generated += st.n_emitted;
    n_sampled += static_cast<uint64_t>(st.n_emitted);
    s.n_draft_accepted += st.accepted_emitted;
    n_accepted += static_cast<uint64_t>(st.accepted_emitted);
    std::optional<SeqEvent> end;
    switch (s.decoder.end()) {
      case DecodeEnd::None: break;
      case DecodeEnd::StopId: {  // reported only as the finish, with its logprobs
        SeqEvent d = done_event(FinishReason::Stop, n_prompt, s.n_generated);
        d.stop_id = s.decoder.stop_id();
        if (s.req.top_logprobs >= 0)
          fill_logprobs(rows[static_cast<size_t>(st.n_emitted - 1)], d.stop_id, s.req.top_logprobs, d);
        end = std::move(d);
        break;
      }
      case DecodeEnd::MaxTokens:
      case DecodeEnd::ContextFull: end = done_event(FinishReason::Length, n_prompt, s.n_generated); break;
      case DecodeEnd::Cancelled: end = done_event(FinishReason::Cancelled, n_prompt, s.n_generated); break;
    }
    if (nd > 0) {
      ++n_verifies;
      s.n_drafted += nd;
      n_drafted += static_cast<uint64_t>(nd);
      try {
        rollback_verify(s.seq, s.kda_steps, st);
      } catch (const std::exception& ex) {  // an inconsistent step log (internal): end only this sequence
        s.seq.mark_failed();                // its state is not kept
        end = done_event(FinishReason::Error, n_prompt, s.n_generated);
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

}  // namespace k3
