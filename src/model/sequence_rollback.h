// Exact rollback of a SequenceState to an earlier position inside the last forward, for
// speculative decoding (algorithms.md §7.4 option A, per-position state slots):
//   KDA layers: the recurrent state S and the conv window are restored from the per-token
//               records a decode-form forward wrote (BatchEntry::kda_steps);
//   MLA layers: the latent cache is truncated to the kept length (rows are never rewritten);
//   n_past:     set to the kept length.
// Also a whole-state KDA snapshot (capture / restore) for small draft models.
#pragma once
#include <cstdint>
#include <vector>

#include "model/k3_model.h"

namespace k3 {

/// Floats of one per-token record of one KDA layer of `seq` (S.size() + conv.size()), or 0 for a
/// model without KDA layers. A kda_steps log of a T-token forward holds
/// n_kda_layers · T · kda_record_floats(seq) floats.
int64_t kda_record_floats(const SequenceState& seq);

/// Rolls `seq` back from the end of a decode-form forward of `n_window` tokens (which started at
/// n_past = seq.n_past() − n_window and wrote `steps`, see BatchEntry::kda_steps) to keep only
/// the first `n_keep` of those tokens (1 <= n_keep <= n_window): every KDA layer gets the state
/// recorded after token n_keep − 1, every MLA cache is truncated, n_past = start + n_keep.
/// The result is bit-identical to a state that was fed only those n_keep tokens (decode form).
/// Errors (k3::Error, `seq` unchanged): n_keep out of range, n_window > seq.n_past(), or a log
/// whose size is not n_kda_layers · n_window · kda_record_floats(seq).
void rollback_to_step(SequenceState& seq, const std::vector<float>& steps, int64_t n_window, int64_t n_keep);

/// Copies every KDA layer's S and conv window of `seq` (n_kda_layers · kda_record_floats floats).
std::vector<float> capture_kda(const SequenceState& seq);

/// Restores a capture_kda() snapshot into `seq` and truncates its MLA caches / n_past to
/// `n_past` (<= seq.n_past()). Errors (k3::Error, `seq` unchanged): wrong snapshot size or n_past.
void restore_kda(SequenceState& seq, const std::vector<float>& snapshot, int64_t n_past);

}  // namespace k3
