// Non-finite results: where a printed result (perplexity, logits, bench) would hold a NaN or an
// Inf, the tools stop with an error naming the position and — when the replay is small enough —
// the first named intermediate of the forward pass (model/dump.h names: "blk.3.attn_out", ...)
// that holds a non-finite value, so a corrupt weight is traced to its layer and sublayer.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "model/k3_model.h"

namespace k3 {

/// Index of the first NaN/Inf in x, or -1 when all are finite.
int64_t first_nonfinite(std::span<const float> x);

/// Replays `tokens` from an empty sequence with a DumpSink in a temporary directory (deleted
/// afterwards) and returns e.g. "first non-finite intermediate: blk.3.attn_out (position 5,
/// value nan)". Skips the replay (and says so, pointing at `k3 logits --dump`) when the dumps
/// would exceed max_dump_bytes. Never throws: an error of the replay itself (e.g. the router
/// refusing NaN scores) still reports the last tensor written before it.
std::string locate_nonfinite(const Model& model, std::span<const int32_t> tokens,
                             uint64_t max_dump_bytes = 512ull << 20);

/// For an error thrown by Model::forward over `tokens`: when its message speaks of NaN / Inf /
/// non-finite values (e.g. the router's "only 0 of 16 expert scores are not NaN"), a k3::Error
/// with the same message plus "; " + locate_nonfinite(model, tokens); otherwise the message as is.
/// A model split over ranks gets no replay (the error may be this rank's alone, and a replay's
/// collectives would not match the other ranks'): the message says to rerun as one process.
std::string explain_forward_error(const std::exception& e, const Model& model, std::span<const int32_t> tokens);

}  // namespace k3
