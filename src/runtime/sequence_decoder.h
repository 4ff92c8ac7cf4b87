// k3::SequenceDecoder — the decode rules of one sequence, in one place: after a forward, pick the
// emitted ids from the logits rows (sample one id, or accept a prefix of verified drafts with
// accept_drafts), stream them in order under the stop / cancel / context / length rules, cap the
// next step's drafts, and decide how many ids of a verify window the state keeps (the rollback).
// generate() (`k3 run`, `k3 chat`, with or without a Speculator) and the Scheduler (`k3 serve`)
// both run their sequences through it, so the two agree id for id.
//
// Order of the checks for each emitted id (plain decoding's order):
//   1. a stop id ends the sequence (DecodeEnd::StopId): it is emitted last, never streamed, and
//      never fed to the model;
//   2. the id is streamed (EmitFn); false ends it (DecodeEnd::Cancelled);
//   3. the context: the state holds `n_held` ids with this id pending; n_held + 1 >= n_ctx ends
//      it (DecodeEnd::ContextFull: the pending id would take the last free position);
//   4. the length: max_tokens ids emitted (stop id included) ends it (DecodeEnd::MaxTokens).
// The ids after the one that ended the sequence are discarded.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/k3_model.h"
#include "model/prefill_grid.h"
#include "runtime/grammar_constraint.h"
#include "runtime/sampler.h"
#include "runtime/speculative.h"

namespace k3 {

/// Why a sequence's decoding ended.
enum class DecodeEnd {
  None,         ///< still decoding
  StopId,       ///< a stop id was emitted (the last id; not streamed, not fed)
  MaxTokens,    ///< DecodeLimits::max_tokens ids were emitted
  ContextFull,  ///< the state plus the pending id fill DecodeLimits::n_ctx tokens
  Cancelled,    ///< the stream declined an id, or the caller cancelled (SequenceDecoder::finish)
};

/// The limits of one sequence's decoding.
struct DecodeLimits {
  int64_t max_tokens = -1;        ///< ids to emit at most (a final stop id included); -1 = unlimited
  int64_t n_ctx = 4096;           ///< tokens the sequence may hold (prompt included), >= 2
  int64_t n_vocab = 0;            ///< ids are sampled and drafted in [0, n_vocab), >= 1
  std::vector<int32_t> stop_ids;  ///< ids that end the sequence
};

/// What SequenceDecoder::step decided for one forward's rows.
struct DecodeStep {
  std::vector<int32_t> ids;      ///< ids picked from the rows, in order (the rule's whole output)
  int64_t n_emitted = 0;         ///< of those, emitted (a prefix of ids; the rest is discarded)
  int64_t n_drafts = 0;          ///< draft ids the rows verified (Draft::ids.size())
  int64_t accepted = 0;          ///< drafts accepted by the rule among `ids`
  int64_t accepted_emitted = 0;  ///< drafts accepted among the emitted ids
  /// Window ids ([pending, drafts...], n_drafts + 1) the state keeps: the emitted ids but the
  /// last one are drafts the state already holds, and the window's first id is the pending one
  /// of the previous step, so keep = n_emitted.
  int64_t keep() const { return n_emitted; }
  /// True when the state holds window ids that were not kept (rollback_verify undoes them).
  bool needs_rollback() const { return n_drafts > 0 && keep() < n_drafts + 1; }
};

/// Streams one emitted, non-stop id; `row` = the index of the logits row it was picked from.
/// Returns false to end the sequence (DecodeEnd::Cancelled).
using EmitFn = std::function<bool(int32_t id, size_t row)>;

class SequenceDecoder {
 public:
  /// Errors (k3::Error naming the field): max_tokens < -1, n_ctx < 2, n_vocab < 1.
  SequenceDecoder(DecodeLimits limits, PrefillGrid grid);

  const DecodeLimits& limits() const { return lim_; }
  bool is_stop(int32_t id) const;
  int64_t n_emitted() const { return n_emitted_; }  ///< ids emitted so far (stop id included)
  bool done() const { return end_ != DecodeEnd::None; }
  DecodeEnd end() const { return end_; }
  int32_t stop_id() const { return stop_id_; }  ///< the stop id when end() == StopId, else -1
  /// Ends the sequence without emitting (a cancel seen between steps, max_tokens == 0). A
  /// sequence that already ended keeps its reason.
  void finish(DecodeEnd why);

  /// The most draft ids the next verify may hold, for a state of `n_past` ids with one pending
  /// id: the emitted ids (<= k + 1) stay within max_tokens, the fed window within the context
  /// (n_past + k + 1 < n_ctx) and within one decode-form entry (grid.max_decode_window()).
  /// Formula: min(draft_max, max_tokens - n_emitted - 1, n_ctx - 2 - n_past, window - 1).
  int64_t draft_cap(int64_t n_past, int64_t draft_max) const;
  /// Cuts `draft` to at most `cap` ids and before the first id outside [0, n_vocab) (with its
  /// distributions), and empties it when fewer than `draft_min` ids remain.
  void cap_draft(Draft& draft, int64_t cap, int64_t draft_min) const;

  /// One forward's worth of decoding. rows[i] ([n_vocab] fp32) is the row after window token i
  /// (rows.size() == draft.ids.size() + 1; one row for plain decoding). With drafts the ids are
  /// accept_drafts(sampler, rows, draft, is_stop); without, `forced` (when not null) or
  /// sampler.sample(rows[0]), given to sampler.accept(). Each id then goes through the rules
  /// (file comment); `n_after` = ids the state holds after the forward, so ids[m] is emitted
  /// with n_after - n_drafts + m ids held. Errors: as accept_drafts / Sampler::sample (nothing
  /// emitted), and k3::Error after the sequence ended.
  /// With `constraint` (not null, and no `forced` id) each row is first masked to the ids the
  /// matcher allows after the drafts before it (ConstraintMatcher::mask; a refused draft is thus
  /// rejected by the rule), and each picked id is accepted into the matcher.
  DecodeStep step(Sampler& sampler, std::span<const std::span<const float>> rows, const Draft& draft, int64_t n_after,
                  const EmitFn& emit, const int32_t* forced = nullptr, ConstraintMatcher* constraint = nullptr);

 private:
  DecodeLimits lim_;
  PrefillGrid grid_;
  int64_t n_emitted_ = 0;
  DecodeEnd end_ = DecodeEnd::None;
  int32_t stop_id_ = -1;
};

/// Rolls `seq` back after a verify window so that it holds the window's first st.keep() ids
/// (SequenceState::rollback_to with the per-token KDA states `kda_steps` the verify's decode-form
/// forward logged); does nothing when !st.needs_rollback(). Errors: rollback_to's (a log that
/// does not cover the kept position or does not match the state's layout).
void rollback_verify(SequenceState& seq, const StateLog& kda_steps, const DecodeStep& st);

}  // namespace k3
