#include "runtime/draft_model.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "io/config.h"
#include "io/model_summary.h"

namespace k3 {

namespace {

SamplerParams draft_params(SamplerParams p) {
  p.seed ^= 0x9E3779B97F4A7C15ull;  // independent draws from the target's
  return p;
}

}  // namespace

DraftModelDrafter::DraftModelDrafter(const Model& draft, const SamplerParams& params, int64_t n_vocab)
    : draft_(draft), sampler_(draft_params(params)), n_vocab_(n_vocab), seq_(draft.new_sequence()) {
  if (n_vocab < 1 || n_vocab > draft.config().vocab_size)
    throw Error("--draft-model: the tokenizer has " + std::to_string(n_vocab) +
                " ids but the draft model's vocab_size is " + std::to_string(draft.config().vocab_size));
}

void DraftModelDrafter::reset() {
  seq_ = draft_.new_sequence();
  fed_.clear();
  snaps_.clear();
  base_ = 0;
  sampler_.reset_history();
}

Draft DraftModelDrafter::propose(std::span<const int32_t> ctx, int64_t n_max) {
  // Longest common prefix of what the draft holds and the context.
  const int64_t L = static_cast<int64_t>(ctx.size());
  int64_t common = 0;
  const int64_t lim = std::min<int64_t>(L, static_cast<int64_t>(fed_.size()));
  while (common < lim && fed_[common] == ctx[common]) ++common;
  if (common < static_cast<int64_t>(fed_.size())) {
    // Roll back to `common` ids: possible from the last call's snapshots, else start over.
    const int64_t j = common - base_;
    if (j >= 0 && j < static_cast<int64_t>(snaps_.size())) {
      seq_.rollback_to(snaps_[j], common);
      fed_.resize(static_cast<size_t>(common));
    } else {
      reset();
      common = 0;
    }
  }
  // The penalty history follows the context (the ids the target accepted).
  const int64_t win = sampler_.params().repeat_last_n < 0 ? L : std::min<int64_t>(L, sampler_.params().repeat_last_n);
  sampler_.reset_history();
  for (int64_t i = L - win; i < L; ++i) sampler_.accept(ctx[i]);

  Draft d;
  if (common == L) {  // nothing new to feed: cannot happen (the pending id is always new)
    return d;
  }
  std::vector<float> logits = draft_.forward(seq_, ctx.subspan(static_cast<size_t>(common)), false);
  fed_.assign(ctx.begin(), ctx.end());
  base_ = L;
  snaps_.clear();
  snaps_.push_back(seq_.snapshot());
  const bool greedy = sampler_.params().temp <= 0.0f;
  for (int64_t i = 0; i < n_max; ++i) {
    const std::span<const float> row(logits.data(), static_cast<size_t>(n_vocab_));
    int32_t id;
    if (greedy) {
      id = sampler_.sample(row);
    } else {
      Sampler::Weights q = sampler_.weights(row);
      const double u = sampler_.uniform() * q.z;
      double cum = 0.0;
      id = q.ids.back();
      for (size_t c = 0; c < q.ids.size(); ++c) {
        cum += q.w[c];
        if (u < cum) {
          id = q.ids[c];
          break;
        }
      }
      d.q.push_back(std::move(q));
    }
    d.ids.push_back(id);
    sampler_.accept(id);
    if (i + 1 == n_max) break;
    const int32_t one[1] = {id};
    logits = draft_.forward(seq_, one, false);
    fed_.push_back(id);
    snaps_.push_back(seq_.snapshot());
  }
  return d;
}

uint64_t DraftModelDrafter::bytes() const {
  uint64_t b = seq_.bytes();
  for (const auto& s : snaps_) b += s.bytes();
  return b;
}

uint64_t DraftModelDrafter::max_bytes(const ModelConfig& draft, int64_t n_ctx, int64_t draft_max) {
  // The state at n_ctx tokens plus draft_max whole-KDA snapshots (snaps_ holds one per drafted id).
  const StateBytes sb = state_bytes(draft);
  return sb.total(n_ctx) + static_cast<uint64_t>(std::max<int64_t>(draft_max, 0)) * sb.kda_total;
}

void check_draft_compatible(const ModelConfig& target, const ModelConfig& draft, const std::string& target_tok,
                            const std::string& draft_tok) {
  if (target.vocab_size != draft.vocab_size)
    throw Error("--draft-model: vocab_size " + std::to_string(draft.vocab_size) + " differs from the model's " +
                std::to_string(target.vocab_size) + " (a draft needs the same tokenizer and vocabulary)");
  if (target_tok != draft_tok)
    throw Error("--draft-model: its tiktoken.model differs from the model's (a draft needs the same tokenizer)");
}

}  // namespace k3
