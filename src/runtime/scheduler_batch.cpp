// The batch of one Scheduler step (scheduler.h): every decoding sequence's pending id (a
// decode-form window with its drafts when it speculates), then prompt pieces on the model's
// prefill grid under the step's token budget.
#include <algorithm>
#include <exception>

#include "runtime/scheduler_slot.h"

namespace k3 {

void Scheduler::build_batch(std::vector<std::unique_ptr<Slot>>& slots, std::vector<BatchEntry>& batch,
                            std::vector<size_t>& who) {
  // A piece starts where the sequence's prefill stands and ends where the grid allows
  // (PrefillGrid::piece_end): forward_batch cuts it into prefill_chunk pieces, exactly as a lone
  // prefill of the prompt is cut.
  const PrefillGrid grid = model_.prefill_grid();
  int64_t budget = opt_.step_tokens;
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
    const int64_t start = static_cast<int64_t>(s.prefilled), end = static_cast<int64_t>(s.req.prompt.size());
    int64_t n = grid.piece_end(start, end, budget) - start;
    // Prefill always progresses: the first prefilling sequence gets a piece even when the
    // decode rows took the whole budget.
    if (n == 0 && !any_prefill) n = grid.piece_end(start, end, grid.chunk()) - start;
    if (n == 0) continue;
    // A piece ends at the next KDA snapshot point of the prefix cache (on the chunk grid when
    // the block size is a multiple of prefill_chunk), so the state there can be copied.
    for (int64_t c : s.cuts)
      if (c > start) {
        n = std::min<int64_t>(n, c - start);
        break;
      }
    const bool last = n == end - start;
    batch.push_back({&s.seq, std::span<const int32_t>(s.req.prompt).subspan(s.prefilled, static_cast<size_t>(n)),
                     last ? BatchLogits::Last : BatchLogits::None});
    if (s.req.images) {
      s.piece_embeds = s.req.images->embeds(start, n);
      batch.back().embeds = s.piece_embeds;
    }
    who.push_back(i);
    budget -= n;
    any_prefill = true;
  }
}

void Scheduler::propose_drafts(Slot& s) {
  const Options::Speculation& sp = *opt_.speculation;
  // Caps (SequenceDecoder::draft_cap, as in generate()): the emitted ids (<= k + 1) stay
  // within max_tokens, the fed window within the context and one decode-form entry.
  const int64_t k = s.decoder.draft_cap(s.seq.n_past(), sp.spec.draft_max);
  if (k < std::max<int64_t>(1, sp.spec.draft_min)) return;
  // The drafter's context: every id the state holds, then the pending id (the last of out).
  std::vector<int32_t> ctx(s.req.prompt.begin(), s.req.prompt.end());
  ctx.insert(ctx.end(), s.out.begin(), s.out.end());
  try {
    s.draft = s.drafter->propose(ctx, k);
  } catch (const std::exception& ex) {  // e.g. the draft model's state failed: decode plainly from now on
    s.drafter.reset();
    s.draft = {};
    absorbed("scheduler: slot " + std::to_string(s.id) + ": the drafter failed (" + ex.what() +
             "); the sequence decodes without drafts from now on");
    return;
  }
  s.decoder.cap_draft(s.draft, k, sp.spec.draft_min);
}

}  // namespace k3
