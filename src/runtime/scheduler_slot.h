// Scheduler internals shared by its files (scheduler.cpp: the queue and the engine loop;
// scheduler_admission.cpp: admission, retirement and kept slot states; scheduler_batch.cpp: the
// batch of one step). Not part of the public API.
#pragma once
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "runtime/scheduler.h"
#include "runtime/sequence_decoder.h"
#include "runtime/step_plan.h"

namespace k3 {

/// A running sequence: its request, state, sampler, decode rules and progress.
struct Scheduler::Slot {
  SeqRequest req;
  std::shared_ptr<SeqHandle> handle;
  SequenceState seq;
  Sampler sampler;
  SequenceDecoder decoder;    ///< the stop / length / context rules and draft caps
  size_t prefilled = 0;       ///< prompt ids fed so far
  int32_t pending = -1;       ///< the last sampled id, fed by the next step (decode phase)
  int64_t n_generated = 0;    ///< ids sampled
  size_t forced_pos = 0;      ///< next forced id
  size_t reused = 0;          ///< prompt ids taken from the prefix cache
  std::vector<int64_t> cuts;  ///< the cache's snapshot points of this prompt (ascending)
  PrefixCache::Pin pin;       ///< the cached blocks this sequence uses
  int64_t id = 0;             ///< slot id in [0, n_parallel)
  bool from_kept = false;     ///< continues a kept slot state: its blocks are not cached
  /// The sequence ends as cancelled at the next step: the handle's flag as the engine read it
  /// before the step (rank 0, one process), or the step plan's (other ranks, Options::group).
  bool cancel_seen = false;
  /// keep_slot_states: where the kept state is cut (PrefillGrid::resume_point of the prompt;
  /// 0 = none), and the KDA state there (SequenceState::snapshot), taken when prefill reaches it.
  int64_t kept_point = 0;
  StateLog kept_kda;
  std::vector<int32_t> out;  ///< ids sampled
  std::optional<ConstraintMatcher> constraint;  ///< from req.constraint (null: none)
  // Speculative decoding (Options::speculation).
  std::unique_ptr<Drafter> drafter;  ///< null: plain decoding
  Draft draft;                       ///< this step's drafts (verified when non-empty)
  std::vector<int32_t> window;       ///< this step's decode-form window [pending, drafts]
  std::vector<EmbedRows> piece_embeds;  ///< this step's prompt piece's image rows (req.images)
  std::vector<MediaKey> media;          ///< req.images' prefix-cache keys (empty: none)
  StateLog kda_steps;                ///< per-token KDA states of the window (rollback)
  int64_t n_drafted = 0;             ///< draft ids verified
  int64_t n_draft_accepted = 0;      ///< of those, emitted
  bool decoding() const { return prefilled == req.prompt.size(); }
  /// Bytes this sequence holds: state, drafter, verify records.
  uint64_t bytes() const {
    return seq.bytes() + (drafter ? drafter->bytes() : 0) + kda_steps.bytes() + kept_kda.bytes();
  }

  Slot(SeqRequest r, std::shared_ptr<SeqHandle> h, SequenceState s, DecodeLimits lim, PrefillGrid grid)
      : req(std::move(r)),
        handle(std::move(h)),
        seq(std::move(s)),
        sampler(req.sampling),
        decoder(std::move(lim), grid) {
    for (int32_t id : req.prompt) sampler.accept(id);  // llama.cpp's penalty history
    if (req.images) media = req.images->media_keys();
    if (req.constraint) constraint.emplace(req.constraint);
  }
};

/// A /slots call on rank 0 under Options::group, waiting for the next plan (engine_loop).
struct Scheduler::SlotCommand {
  StepPlan::SlotOp op;
  std::promise<SlotFileResult> result;
};

/// The extra_json key of a slot state file (save_slot): {"slot": {"exact_resume": true, "grain": g}}.
inline constexpr const char* kSlotFileKey = "slot";

/// The last event of a sequence.
SeqEvent done_event(FinishReason why, int64_t n_prompt, int64_t n_gen);

/// log-softmax of row[0, n) at `id` into e.logprob, and the `top` most likely ids into e.top
/// (ties to the lower id).
void fill_logprobs(std::span<const float> row, int32_t id, int top, SeqEvent& e);

}  // namespace k3
