// Speculative decoding (algorithms.md §7): a drafter proposes k tokens, the target
// model checks [pending token, d_1 .. d_k] in ONE forward (decode form: bit-identical rows to
// one-token decoding, BatchEntry::per_token), the acceptance rule keeps a prefix of the drafts
// plus one token from the target, and the state is rolled back exactly to the kept tokens
// (SequenceState::rollback_to: per-token KDA states written during the verify, MLA truncated).
//
// Exactness:
//   temp <= 0 (greedy): the emitted ids are the ids plain decoding emits, and the state after
//     every step is bit-identical to plain decoding's (the verify rows are the decode rows).
//   temp > 0: the speculative-sampling rule (accept d with probability min(1, p(d)/q(d)),
//     otherwise draw from the normalized max(0, p − q)) with p and q the FINAL distributions of
//     the sampler chain (repeat/frequency/presence penalties with the history up to that
//     position, top-k, top-p, min-p, temperature: Sampler::weights) — the output distribution
//     equals plain sampling with the same settings; the random stream differs from plain
//     sampling (same distribution, not the same draws). Prompt lookup and a greedy draft have a
//     one-hot q.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/k3_model.h"
#include "runtime/generator.h"
#include "runtime/sampler.h"

namespace k3 {

/// A chain of drafted ids and the distributions they were drawn from.
struct Draft {
  std::vector<int32_t> ids;
  /// q_j for ids[j] (the drafter's final sampling distribution); empty = one-hot on ids[j].
  std::vector<Sampler::Weights> q;
};

/// Something that proposes the next ids of a sequence.
class Drafter {
 public:
  virtual ~Drafter() = default;
  /// Up to n_max ids to follow `context` (every id the target has been fed, then the pending,
  /// not yet fed id). May return fewer (or none).
  virtual Draft propose(std::span<const int32_t> context, int64_t n_max) = 0;
  /// The next context does not extend the last one (a new sequence): drop any state.
  virtual void reset() {}
  virtual std::string name() const = 0;
  /// Bytes of state the drafter holds now (a draft model's sequence state and snapshots), for
  /// the scheduler's memory report; 0 for a drafter without state.
  virtual uint64_t bytes() const { return 0; }
};

struct SpecOptions {
  int64_t draft_max = 4;  ///< most drafted ids per verify (--draft-max), >= 1
  int64_t draft_min = 0;  ///< fewer proposed ids than this: a plain decode step (--draft-min), >= 0
  /// Throws k3::Error naming --draft-max / --draft-min when out of range (draft_max in [1, 64],
  /// draft_min in [0, draft_max]).
  void validate() const;
};

struct SpecStats {
  int64_t verifies = 0;  ///< target forwards in the decode loop (with or without drafts)
  int64_t drafted = 0;   ///< ids the target checked
  int64_t accepted = 0;  ///< of those, accepted
  int64_t emitted = 0;   ///< ids emitted by the decode loop (accepted + one per verify)
  double draft_ms = 0, verify_ms = 0, rollback_ms = 0;
  /// "draft: accepted 123/200 (61.5%), 2.41 tokens per verify, 51 verifies | draft 3 ms, verify 40 ms, rollback 1 ms"
  std::string describe() const;
};

/// The acceptance rule over one verify's logits: rows[i] ([n_vocab] fp32, i = 0..k) is the
/// target's row after window token i, draft.ids[i] (i < k) is checked against row i. Returns
/// the emitted ids: the accepted prefix of the drafts, then the correction (first rejection)
/// or bonus (all accepted) id. Acceptance stops early after an accepted id for which
/// is_stop(id) holds (it is emitted last). Every emitted id is given to sampler.accept() in
/// order, so row i is judged with the penalty history of the ids before it.
/// Errors: k3::Error for rows.size() != k + 1 or draft.q of the wrong size; Sampler's errors.
std::vector<int32_t> accept_drafts(Sampler& sampler, std::span<const std::span<const float>> rows, const Draft& draft,
                                   const std::function<bool(int32_t)>& is_stop);

/// The speculative decode loop plugged into generate() through GenerateOptions::speculative.
class Speculator {
 public:
  /// Throws opt.validate()'s errors or for a null drafter.
  Speculator(std::unique_ptr<Drafter> drafter, SpecOptions opt);
  ~Speculator();
  /// generate()'s decode loop (same contract; called after the prompt is prefilled and
  /// accepted by the sampler): `logits` = the prefill's last row. The stop / stream / context /
  /// length rules, the draft caps and the rollback are SequenceDecoder's
  /// (runtime/sequence_decoder.h), as in plain decoding and the Scheduler: a proposal is cut to
  /// draft_cap() ids and before an id outside [0, n_vocab). Fills r.ids / r.stop / r.stop_id.
  void decode(const Model& model, SequenceState& seq, std::span<const int32_t> prompt, Sampler& sampler,
              const GenerateOptions& opt, std::vector<float> logits, const std::function<bool(int32_t)>& on_token,
              GenerateResult& r);
  const SpecStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }
  Drafter& drafter() { return *drafter_; }
  const Drafter& drafter() const { return *drafter_; }
  const SpecOptions& options() const { return opt_; }

 private:
  std::unique_ptr<Drafter> drafter_;
  SpecOptions opt_;
  SpecStats stats_;
  std::vector<int32_t> history_;  ///< every id the target state holds (its n_past ids)
  StateLog steps_;                ///< per-token KDA states of the last verify
};

}  // namespace k3
