// Draft-model drafter: a smaller checkpoint with the same tokenizer / vocabulary (e.g.
// models/k3-nano for models/k3-mini), run by the same engine with its own SequenceState that
// follows the target's accepted ids. Drafts are drawn with the target's sampler settings (its
// own RNG and penalty history), so q is the draft's final sampling distribution; greedy
// (temp <= 0) drafts are the draft's argmax (one-hot q).
#pragma once
#include <cstdint>
#include <vector>

#include "model/k3_model.h"
#include "runtime/sampler.h"
#include "runtime/speculative.h"

namespace k3 {

class DraftModelDrafter : public Drafter {
 public:
  /// `draft` must outlive the drafter. `params`: the target's sampler settings (the seed is
  /// offset so the draft's draws are independent of the target's). n_vocab: ids the tokenizer
  /// has (drafts stay in [0, n_vocab)); must be <= both models' vocab_size.
  DraftModelDrafter(const Model& draft, const SamplerParams& params, int64_t n_vocab);
  /// Syncs the draft state with `context` (feeds the ids it has not seen; rolls back the drafts
  /// of the last call that were not accepted), then drafts up to n_max ids one at a time.
  Draft propose(std::span<const int32_t> context, int64_t n_max) override;
  void reset() override;
  std::string name() const override { return "draft model"; }
  /// The draft's SequenceState bytes plus its rollback snapshots.
  uint64_t bytes() const override;
  /// Upper bound of bytes() for a context of n_ctx tokens and drafts of at most draft_max ids.
  static uint64_t max_bytes(const ModelConfig& draft, int64_t n_ctx, int64_t draft_max);

 private:
  const Model& draft_;
  Sampler sampler_;
  int64_t n_vocab_;
  SequenceState seq_;
  std::vector<int32_t> fed_;  ///< ids the draft state holds
  /// snaps_[j]: the KDA state (SequenceState::snapshot) after base_ + j ids, j = 0 .. drafts fed − 1
  std::vector<StateLog> snaps_;
  int64_t base_ = 0;  ///< fed_.size() when snaps_[0] was taken
};

/// Throws k3::Error (naming --draft-model) unless the draft's vocab_size equals the target's
/// and both use the same tokenizer file (`target_tok` / `draft_tok`: tiktoken.model bytes).
void check_draft_compatible(const ModelConfig& target, const ModelConfig& draft, const std::string& target_tok,
                            const std::string& draft_tok);

}  // namespace k3
