// k3::SequenceDecoder (runtime/sequence_decoder.h): the decode rules of one sequence.
#include "runtime/sequence_decoder.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace k3 {

SequenceDecoder::SequenceDecoder(DecodeLimits limits, PrefillGrid grid) : lim_(std::move(limits)), grid_(grid) {
  if (lim_.max_tokens < -1)
    throw Error("decode limits: max_tokens expected -1 (unlimited) or >= 0, found " + std::to_string(lim_.max_tokens));
  if (lim_.n_ctx < 2) throw Error("decode limits: n_ctx expected >= 2, found " + std::to_string(lim_.n_ctx));
  if (lim_.n_vocab < 1) throw Error("decode limits: n_vocab expected >= 1, found " + std::to_string(lim_.n_vocab));
}

bool SequenceDecoder::is_stop(int32_t id) const {
  return std::find(lim_.stop_ids.begin(), lim_.stop_ids.end(), id) != lim_.stop_ids.end();
}

void SequenceDecoder::finish(DecodeEnd why) {
  if (end_ == DecodeEnd::None) end_ = why;
}

int64_t SequenceDecoder::draft_cap(int64_t n_past, int64_t draft_max) const {
  int64_t k = draft_max;
  if (lim_.max_tokens >= 0) k = std::min<int64_t>(k, lim_.max_tokens - n_emitted_ - 1);
  return std::min<int64_t>({k, lim_.n_ctx - 2 - n_past, grid_.max_decode_window() - 1});
}

void SequenceDecoder::cap_draft(Draft& draft, int64_t cap, int64_t draft_min) const {
  size_t n = std::min(draft.ids.size(), static_cast<size_t>(std::max<int64_t>(cap, 0)));
  for (size_t j = 0; j < n; ++j)
    if (draft.ids[j] < 0 || draft.ids[j] >= lim_.n_vocab) n = j;  // a draft stops at an id outside the vocabulary
  draft.ids.resize(n);
  if (!draft.q.empty()) draft.q.resize(std::min(draft.q.size(), n));
  if (static_cast<int64_t>(n) < draft_min) draft = {};
}

DecodeStep SequenceDecoder::step(Sampler& sampler, std::span<const std::span<const float>> rows, const Draft& draft,
                                 int64_t n_after, const EmitFn& emit, const int32_t* forced,
                                 ConstraintMatcher* constraint) {
  if (done()) throw Error("decode: the sequence already ended (internal)");
  const size_t k = draft.ids.size();
  if (forced != nullptr) constraint = nullptr;  // forced ids are emitted as given
  // A constraint masks each row with the matcher's state after the drafts before it: the drafts
  // are accepted into the matcher tentatively (up to the first one it refuses, which the rule then
  // rejects: its masked probability is 0) and rolled back; rows past a refused draft are never
  // read by the rule.
  std::vector<std::vector<float>> masked;
  std::vector<std::span<const float>> masked_rows;
  if (constraint != nullptr) {
    masked.resize(rows.size());
    masked_rows.resize(rows.size());
    int64_t tentative = 0;
    bool live = true;
    for (size_t i = 0; i < rows.size(); ++i) {
      masked[i].assign(rows[i].begin(), rows[i].end());
      if (live) constraint->mask(masked[i]);
      masked_rows[i] = masked[i];
      if (i < k && live) {
        if (constraint->allows(draft.ids[i])) {
          constraint->accept(draft.ids[i]);
          ++tentative;
        } else {
          live = false;
        }
      }
    }
    constraint->rollback(tentative);
    rows = masked_rows;
  }
  DecodeStep st;
  st.n_drafts = static_cast<int64_t>(k);
  if (k > 0) {
    st.ids = accept_drafts(sampler, rows, draft, [this](int32_t id) { return is_stop(id); });
    st.accepted = static_cast<int64_t>(st.ids.size()) - 1;
    if (is_stop(st.ids.back()) && st.ids.size() <= k && st.ids.back() == draft.ids[st.ids.size() - 1])
      ++st.accepted;  // stopped on an accepted stop id: no correction id follows
  } else {
    if (rows.size() != 1)
      throw Error("decode: " + std::to_string(rows.size()) + " logits rows without drafts (expected 1)");
    const int32_t id = forced != nullptr ? *forced : sampler.sample(rows[0]);
    sampler.accept(id);
    st.ids.push_back(id);
  }
  for (size_t m = 0; m < st.ids.size(); ++m) {
    const int32_t id = st.ids[m];
    if (constraint != nullptr) constraint->accept(id);
    ++n_emitted_;
    ++st.n_emitted;
    // An emitted draft counts as accepted unless it is the target's own last id (correction or
    // bonus); an accepted stop id ends the run without one.
    if (m < k && id == draft.ids[m] && (m + 1 < st.ids.size() || is_stop(id))) ++st.accepted_emitted;
    if (is_stop(id)) {
      end_ = DecodeEnd::StopId;
      stop_id_ = id;
      break;
    }
    if (!emit(id, m)) {
      end_ = DecodeEnd::Cancelled;
      break;
    }
    const int64_t n_held = n_after - static_cast<int64_t>(k) + static_cast<int64_t>(m);
    if (n_held + 1 >= lim_.n_ctx) {  // the pending id takes the last free position
      end_ = DecodeEnd::ContextFull;
      break;
    }
    if (lim_.max_tokens >= 0 && n_emitted_ >= lim_.max_tokens) {
      end_ = DecodeEnd::MaxTokens;
      break;
    }
  }
  return st;
}

void rollback_verify(SequenceState& seq, const StateLog& kda_steps, const DecodeStep& st) {
  if (st.needs_rollback()) seq.rollback_to(kda_steps, kda_steps.first() + st.keep() - 1);
}

}  // namespace k3
