// Rows of a batched activation block: a forward over a batch of sequences stacks every
// sequence's new tokens into one [T_total, D] block (so each weight matrix is read once for all
// rows); the sublayers that carry per-sequence state (KDA, MLA) then run each sequence over its
// own rows. Like llama.cpp's llama_batch / vLLM's flattened scheduler output.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "model/sequence_state.h"

namespace k3 {

/// The rows [row0, row0 + T) of a batched block that belong to one sequence, in its order.
struct SeqRows {
  int64_t row0 = 0;  ///< first row in the block
  int64_t T = 0;     ///< tokens of this sequence in the block, >= 1
  /// Decode form: the rows run as T one-token steps (KDA: the decode-step recurrence per token;
  /// MLA: absorbed attention), so every row and the state after it are bit-identical to T
  /// one-token forwards (speculative verification, algorithms.md §7.2).
  bool per_token = false;
  /// When set (decode form only), every KDA layer appends, in layer order and for each of its T
  /// tokens, the state after that token: S [H, d, d] then the conv window [3, K−1, C], fp32
  /// (one record = KdaState::S.size() + conv.size() floats; model/sequence_state.h StateLog).
  StateLog* kda_steps = nullptr;
};

/// Total rows of a batch (the sum of T); the segments must tile [0, total) in order.
inline int64_t total_rows(std::span<const SeqRows> segs) { return segs.empty() ? 0 : segs.back().row0 + segs.back().T; }

}  // namespace k3
