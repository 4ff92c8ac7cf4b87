// k3::Scheduler — continuous batching over one k3::Model (the serving loop of `k3 serve`).
//
// Requests wait in a bounded FIFO queue; up to `n_parallel` of them run at once, each in a slot
// that owns its SequenceState (KDA state + conv window + MLA latent cache) and its Sampler. One
// engine thread repeats a step: every running sequence that is decoding contributes its pending
// id, prefilling sequences contribute prompt pieces under a per-step token budget, and the whole
// step is ONE Model::forward_batch call (each weight matrix read once for all rows). Then every
// sequence that produced logits samples its next id and streams it to its handle. With
// Options::speculation, a decoding sequence may instead contribute a window [pending, drafts]
// verified in the same forward and rolled back to the accepted ids (see Speculation).
//
// Files: scheduler.cpp (the queue, the engine loop and one step), scheduler_admission.cpp
// (slot choice, cache resume, kept slot states: allocation and state copies outside the lock),
// scheduler_batch.cpp (the batch of one step: decode rows, drafts, prefill pieces). The decode
// rules of every sequence are runtime/sequence_decoder.h, the same as generate()'s.
//
// Batch invariance: a sequence's prompt is cut into the same pieces as a lone
// Model::forward/prefill call cuts it (Model::prefill_grid(): pieces of prefill_chunk from the
// start of the prompt), and every batched kernel computes a row as it would alone, so a request's ids do not depend on
// what else runs (tests/runtime/test_scheduler.cpp checks bit-identical logits and ids).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/comm.h"
#include "core/error.h"
#include "model/k3_model.h"
#include "runtime/generator.h"
#include "runtime/grammar_constraint.h"
#include "runtime/image_prompt.h"
#include "runtime/prefix_cache.h"
#include "runtime/sampler.h"
#include "runtime/speculative.h"

namespace k3 {

/// One generation request, as the runtime sees it (the server translates HTTP into this).
struct SeqRequest {
  std::vector<int32_t> prompt;    ///< ids to prefill, >= 1 (with [BOS] etc. already in place)
  SamplerParams sampling;         ///< validated by submit()
  int64_t max_tokens = 128;       ///< ids to sample at most, >= 1 (stop ids included)
  std::vector<int32_t> stop_ids;  ///< sampled ids that end the sequence (finish "stop")
  int64_t n_vocab = 0;            ///< sample only ids [0, n_vocab) (the tokenizer's); 0 = all
  /// -1: no logprobs; 0..20: each event carries the chosen id's log-probability and this many
  /// most likely alternatives (log-softmax of the raw logits, before penalties/temperature).
  int top_logprobs = -1;
  /// Test-only (`k3 serve --test-forced-output`): emit these ids in order instead of sampling
  /// (the forward still runs), then sample as usual. Stop ids among them end the sequence.
  std::vector<int32_t> forced_ids;
  /// false: no speculative decoding for this request even when the scheduler has a drafter
  /// (the request's `"speculative": false`). Output is the same either way for greedy.
  bool speculative = true;
  /// Prefix-cache partition (0 = shared): the sequence reuses and stores cached blocks of this
  /// partition only, and continues a kept slot state only of the same partition.
  uint64_t cache_partition = 0;
  /// The prompt's images (runtime/image_prompt.h: rows at the <|media_pad|> positions, digests
  /// for the prefix cache), or null. A sequence with images neither continues nor leaves a kept
  /// slot state (those are keyed by ids only); the prefix cache serves it, keyed by content.
  std::shared_ptr<const ImagePrompt> images;
  /// Grammar constraint of the output (ConstraintCompiler::compile; null = none): every step's
  /// logits are masked to the ids it allows, drafts included (runtime/grammar_constraint.h).
  std::shared_ptr<const CompiledConstraint> constraint;
  /// The spec `constraint` was compiled from (empty with no constraint): the step plan carries
  /// it to the other ranks of a group, which compile it with Options::constraints.
  ConstraintSpec constraint_spec;
};

/// Why a sequence ended.
enum class FinishReason { Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason r);  ///< "stop", "length", "cancelled", "error"

/// One streamed event of a sequence: a sampled id, or the end.
struct SeqEvent {
  bool done = false;                           ///< true: the last event; `finish` (and `error`) say why
  int32_t id = -1;                             ///< sampled id (when !done); a stop id is reported only as finish
  float logprob = 0;                           ///< log p(id) when top_logprobs >= 0
  std::vector<std::pair<int32_t, float>> top;  ///< [top_logprobs] (id, log p), most likely first
  FinishReason finish = FinishReason::Stop;
  int32_t stop_id = -1;                        ///< the stop id when finish == Stop by a stop id
  std::string error;                           ///< when finish == Error
  /// With finish == Error: the engine cannot run any request (the group of ranks failed, the
  /// server answers 503), rather than this request failing.
  bool unavailable = false;
  int64_t n_prompt = 0;                        ///< on the last event: prompt ids prefilled
  int64_t n_generated = 0;                     ///< on the last event: ids sampled (a final stop id included)
  int64_t n_drafted = 0;                       ///< on the last event: draft ids verified (speculative decoding)
  int64_t n_draft_accepted = 0;                ///< on the last event: of those, accepted and emitted
  std::chrono::steady_clock::time_point time;  ///< when the engine produced the event
};

/// The caller's end of one submitted request. Thread-safe: the engine pushes, the caller pops.
class SeqHandle {
 public:
  /// Waits up to `timeout` for the next event; nullopt on timeout. After the `done` event,
  /// returns nullopt at once.
  std::optional<SeqEvent> next(std::chrono::milliseconds timeout);
  /// Asks the engine to end the sequence (client gone, stop string matched): it frees the slot
  /// at its next step and sends a done event with FinishReason::Cancelled. Idempotent.
  void cancel() { cancel_.store(true); }
  bool cancelled() const { return cancel_.load(); }
  std::chrono::steady_clock::time_point submitted() const { return submitted_; }

  // Engine side.
  void push(SeqEvent e);
  explicit SeqHandle(std::chrono::steady_clock::time_point t) : submitted_(t) {}

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SeqEvent> events_;
  bool finished_ = false;  ///< the done event was popped
  std::atomic<bool> cancel_{false};
  std::chrono::steady_clock::time_point submitted_;
};

/// Counters and gauges for /metrics and the start-up report.
struct SchedulerStats {
  int64_t running = 0;                  ///< sequences in slots
  int64_t waiting = 0;                  ///< requests queued
  uint64_t state_bytes = 0;             ///< bytes held by the running sequences' states
  uint64_t prompt_tokens_total = 0;     ///< prompt ids prefilled (computed)
  uint64_t prompt_tokens_reused = 0;    ///< prompt ids taken from the prefix cache instead
  uint64_t generated_tokens_total = 0;  ///< ids sampled
  uint64_t steps_total = 0;             ///< forward_batch calls
  uint64_t finished_total = 0;          ///< sequences ended (any reason)
  uint64_t spec_verifies_total = 0;     ///< speculative verify entries (a window of >= 1 draft id)
  uint64_t spec_drafted_total = 0;      ///< draft ids verified
  uint64_t spec_accepted_total = 0;     ///< draft ids accepted (emitted)
  /// Errors the engine absorbed and went on without the failed part (a kept-state capture or
  /// cut, a prefix-cache store, a drafter's proposal); each is also a line to Options::log.
  uint64_t absorbed_errors_total = 0;
};

/// Thrown by submit() when the queue is full (the server answers 429).
struct QueueFullError : Error {
  using Error::Error;
};

class Scheduler {
 public:
  struct Options {
    int64_t n_parallel = 4;  ///< sequences decoded together (slots), >= 1
    int64_t n_ctx = 4096;    ///< context per sequence (prompt + generated), >= 2
    int64_t max_queue = 64;  ///< requests waiting beyond the slots; submit() throws past it
    /// Tokens per engine step (decode ids + prefill pieces), >= 1. A prefill piece is at most
    /// the model's prefill_chunk; one piece is always admitted so a step makes progress.
    int64_t step_tokens = 512;
    /// Shared prefix cache (prefix_cache.h), or null for none. Admission resumes each prompt
    /// at its longest cached prefix; prefill pieces stop at the cache's snapshot points and
    /// every prefilled block is stored. Must outlive the scheduler.
    PrefixCache* cache = nullptr;
    /// llama-server's slot prompt cache: each slot keeps the state of the last sequence that
    /// ran in it, continued by a later request whose prompt extends those ids, and saved /
    /// restored by save_slot() / restore_slot(). The kept state is cut back to the prompt's
    /// exact resume point (PrefillGrid::resume_point): the prompt's end when it is a multiple
    /// of 64 (of prefill_chunk when that is not a multiple of 64), else the last such multiple
    /// a longer prompt may resume from (PrefillGrid::max_resume, PrefixCache::lookup's rule).
    /// There the state equals a one-pass prefill's bit for bit (the prefill stops at that point
    /// and captures the KDA state; the ids after it, the generated ones in decode form, are
    /// dropped), so a request that extends the kept ids
    /// gives the same logits and ids as the request run alone. Costs up to one more sequence
    /// state per slot plus one KDA snapshot per running sequence (in stats().state_bytes).
    bool keep_slot_states = false;
    /// Speculative decoding (runtime/speculative.h) for every decoding slot: make_drafter is
    /// called once per admitted request (on the engine thread) and returns that sequence's
    /// drafter (prompt lookup, or a draft model with its own state), or null for none. Each
    /// step, a slot whose drafter proposes >= max(1, spec.draft_min) ids (at most
    /// spec.draft_max, capped by SequenceDecoder::draft_cap: max_tokens, the context and
    /// prefill_chunk - 1; cut before an id outside the vocabulary) feeds
    /// [pending id, d_1 .. d_k] as one decode-form entry (BatchEntry::per_token, bit-identical
    /// rows to k + 1 one-token steps) of the same forward_batch as the other slots;
    /// accept_drafts() with the slot's sampler picks the emitted ids, each streamed with plain
    /// decoding's stop / max_tokens / context checks (the rest of the run is discarded), and
    /// the state is rolled back to the emitted ids (SequenceState::rollback_to). Greedy output is
    /// identical to no speculation; with temperature > 0 the distribution is (not the draws).
    struct Speculation {
      SpecOptions spec;
      std::function<std::unique_ptr<Drafter>(const SeqRequest&)> make_drafter;
      /// Bytes one drafter holds at most at n_ctx tokens (a draft model's sequence state and
      /// its rollback snapshots; 0 for prompt lookup), for slot_bytes().
      uint64_t drafter_bytes = 0;
    };
    std::optional<Speculation> speculation = std::nullopt;
    /// Receives one line (no trailing newline) for each error the engine absorbs and goes on
    /// from (SchedulerStats::absorbed_errors_total), e.g. "scheduler: prefix-cache store
    /// failed: ...". Called on the engine thread; may be empty (the line is dropped).
    std::function<void(const std::string&)> log;
    /// The ranks of `mpirun -np N k3 serve` (null or size 1: one process). Every rank builds its
    /// Scheduler with the same options over its shard of the model. Rank 0's takes submit() and
    /// the /slots calls and, before each engine step, broadcasts a StepPlan (step_plan.h: the
    /// admitted requests, the cancelled slot ids, /slots commands, the stop); the other ranks'
    /// engines execute the plans (their submit() is not called) until rank 0's stops, running
    /// the same admissions, prefix-cache lookups and stores, drafts, forwards (with their
    /// collectives), samplers (logit_bias and the grammar constraint included) and rollbacks on their own part
    /// of each state. Before each
    /// forward the ranks compare a hash of the batch (one all-gather of 8 bytes); a difference,
    /// or an error inside the forward, ends the whole group (Comm::abort(1)), since a rank that
    /// left the common sequence of collectives would leave the others waiting.
    std::shared_ptr<Comm> group = nullptr;
    /// Options::group: called with the reason (on the engine thread) just before the group
    /// ends (Comm::abort), e.g. to answer the running requests with an error; may be empty.
    std::function<void(const std::string&)> group_failed;
    /// Options::group, ranks other than 0: compiles the constraint specs of the admitted
    /// requests (SeqRequest::constraint_spec; the same tokenizer and stop ids as rank 0's
    /// compiler). Null: a constrained request in a plan ends the group with an error.
    const ConstraintCompiler* constraints = nullptr;
  };

  /// What save_slot() / restore_slot() / erase_slot() did.
  struct SlotFileResult {
    int64_t n_tokens = 0;  ///< tokens of state saved / restored / erased
    uint64_t bytes = 0;    ///< file bytes written / read
    double ms = 0;         ///< wall time
  };

  /// Starts the engine thread. The model must outlive the scheduler.
  /// Errors: k3::Error naming the option for a value out of range.
  Scheduler(const Model& model, Options opt);
  /// Cancels everything (as shutdown(false)) and joins the engine thread.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  /// Queues a request. Errors (k3::Error, nothing queued): empty prompt, max_tokens < 1, a
  /// prompt that does not fit (prompt.size() >= n_ctx: "prompt is N tokens, the context is M"),
  /// an id outside the vocabulary, invalid sampling; QueueFullError when max_queue requests
  /// already wait; k3::Error after shutdown().
  std::shared_ptr<SeqHandle> submit(SeqRequest req);

  /// Stops accepting; finish = true lets running and queued sequences complete, false cancels
  /// them. Returns once every sequence has ended (the engine thread keeps running idle).
  void shutdown(bool finish);

  SchedulerStats stats() const;
  const Options& options() const { return opt_; }

  /// Writes the kept state of slot `id` (keep_slot_states) to `file` with `fingerprint`, marked
  /// as cut at an exact resume point (extra {"slot": {"exact_resume": true}}).
  /// Errors: k3::Error when id is outside [0, n_parallel), keep_slot_states is off, the slot
  /// keeps no finished sequence, or the file cannot be written.
  SlotFileResult save_slot(int64_t id, const std::filesystem::path& file, const std::string& fingerprint);
  /// Loads `file` (a state of this model: fingerprint checked) as slot `id`'s kept state.
  /// Errors: as save_slot, a busy slot, SequenceState::load's errors naming the file, and a
  /// state without the exact-resume mark of save_slot (a `k3 run` / `k3 chat` state ends with
  /// ids fed in decode form: a request extending it would not equal the request run alone).
  SlotFileResult restore_slot(int64_t id, const std::filesystem::path& file, const std::string& fingerprint);
  /// Drops slot `id`'s kept state. Errors: id out of range, keep_slot_states off.
  SlotFileResult erase_slot(int64_t id);
  // Under Options::group (N ranks) on rank 0, save_slot / restore_slot / erase_slot run on every
  // rank at the next engine step (rank r > 0 with its part in the file Model::state_file
  // names) and return when all ranks are done; a failure on any rank is the error, naming the
  // rank (a restore that failed on some ranks only leaves the slot keeping nothing on all).

  /// Ranks other than 0 of Options::group: waits until rank 0's scheduler stops (its destructor
  /// broadcasts the stop). Returns at once on rank 0 and in one process.
  void wait_stopped();
  /// Per slot: running or not and the tokens of its kept state (for GET /slots).
  std::vector<std::pair<bool, int64_t>> slot_summary() const;
  /// Upper bound of the state bytes of one sequence at n_ctx tokens (KDA + conv + MLA cache),
  /// plus, with speculation, the per-token KDA records of one verify window
  /// (n_kda_layers x (draft_max + 1) x (S + conv) fp32) and Speculation::drafter_bytes, and
  /// with keep_slot_states the KDA snapshot at the exact resume point.
  uint64_t slot_bytes() const;

 private:
  struct Slot;
  struct SlotCommand;
  struct Pending {
    SeqRequest req;
    std::shared_ptr<SeqHandle> handle;
  };
  void engine_loop();
  /// The engine loop of ranks other than 0 (Options::group): executes rank 0's plans.
  void follower_loop();
  /// True under Options::group with more than one rank.
  bool grouped() const { return opt_.group && opt_.group->size() > 1; }
  /// Options::group: ends the whole group after `what` (logged first).
  [[noreturn]] void group_fail(const std::string& what);
  /// Options::group: every rank's hash of this step's batch must equal rank 0's (group_fail).
  void check_same_batch(const std::vector<std::unique_ptr<Slot>>& slots, const std::vector<BatchEntry>& batch,
                        const std::vector<size_t>& who);
  /// Runs a /slots command of a plan on this rank; returns rank 0's result, or throws the first
  /// failing rank's error (collective: the ranks all-gather their errors).
  SlotFileResult run_slot_op(int kind, int64_t id, const std::string& file, const std::string& fingerprint);
  /// A /slots call on rank 0 under Options::group: queued for the next plan, waited for.
  SlotFileResult queue_slot_op(int kind, int64_t id, const std::filesystem::path& file, const std::string& fingerprint);
  SlotFileResult save_slot_here(int64_t id, const std::filesystem::path& file, const std::string& fingerprint);
  SlotFileResult restore_slot_here(int64_t id, const std::filesystem::path& file, const std::string& fingerprint);
  SlotFileResult erase_slot_here(int64_t id);
  /// Ends every queued request whose handle was cancelled (caller holds mu_).
  void drop_cancelled_locked();
  /// One engine step over the running slots: cancellations, the batch, one forward_batch, then
  /// each sequence's rows through its SequenceDecoder (stream, end, roll back).
  void step(std::vector<std::unique_ptr<Slot>>& slots);
  /// Starts a popped request in a free slot id and appends it to `slots` (scheduler_admission.cpp):
  /// the slot id is chosen under mu_, the state allocated, resumed from the prefix cache or the
  /// slot's kept state and reserved outside it. A failure ends the request with an error event.
  void admit(Pending p, std::vector<std::unique_ptr<Slot>>& slots);
  /// The batch of one step (scheduler_batch.cpp): each decoding slot's pending id (with its
  /// drafts), then prompt pieces on the model's prefill grid under the step budget. who[i] =
  /// the index in `slots` of batch[i]'s sequence.
  void build_batch(std::vector<std::unique_ptr<Slot>>& slots, std::vector<BatchEntry>& batch, std::vector<size_t>& who);
  /// Fills s.draft with this step's drafts (none when the caps or --draft-min leave no room).
  void propose_drafts(Slot& s);
  /// A sequence ends: its slot id is free again, and its state is kept (keep_slot_states); the
  /// cut back to the exact resume point happens outside mu_.
  void retire(Slot& s);
  /// Counts an absorbed error (SchedulerStats::absorbed_errors_total) and logs `what`.
  void absorbed(const std::string& what);
  struct Kept {
    std::vector<int32_t> ids;  ///< the ids the state holds
    /// Shared so that save_slot() writes it outside mu_ without a copy; admission copies it
    /// only while a save still holds it.
    std::shared_ptr<SequenceState> state;
    uint64_t partition = 0;  ///< SeqRequest::cache_partition of its sequence
  };
  std::vector<Kept> kept_;  ///< [n_parallel] (guarded by mu_)
  std::vector<bool> busy_;  ///< [n_parallel] slot id in use (guarded by mu_)

  const Model& model_;
  Options opt_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  bool accepting_ = true;
  bool stop_thread_ = false;
  bool cancel_all_ = false;
  bool stopped_ = false;  ///< the engine loop has ended (wait_stopped)
  std::deque<std::shared_ptr<SlotCommand>> commands_;  ///< rank 0 under Options::group: /slots calls for the next plan
  SchedulerStats stats_;
  std::thread thread_;
};

}  // namespace k3
