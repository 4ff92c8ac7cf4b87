// Perplexity over a token sequence with a sliding window — the ONE definition shared with the
// K3-mini trainer's held-out evaluation:
//
//   * the text is tokenized as one string, no [BOS] (the caller does that);
//   * window size n_ctx, stride (default n_ctx / 2), 1 <= stride < n_ctx;
//   * the first window [0, n_ctx) scores the predictions of targets 1 .. n_ctx-1;
//   * window k >= 1 starts at s = k·stride with a FRESH sequence state, covers [s, s + n_ctx)
//     and scores only the targets not scored before, i.e. its last `stride` positions
//     s + n_ctx - stride .. s + n_ctx - 1;
//   * the final window is truncated at the end of the text and scores only the targets not yet
//     scored; windows stop once the last token has been scored;
//   * NLL_t = -log_softmax(logits of position t-1)[token t], computed in double;
//     ppl = exp(mean NLL over all scored targets).
// So every token but the first is scored exactly once.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/k3_model.h"

namespace k3 {

struct PerplexityOptions {
  int64_t n_ctx = 4096;   ///< window size (tokens), >= 2
  int64_t stride = 0;     ///< window step; 0 = n_ctx / 2; must satisfy 1 <= stride < n_ctx
  int64_t n_batch = 512;  ///< tokens per forward call inside a window, >= 1
  int64_t n_vocab = 0;    ///< softmax over ids [0, n_vocab) only (the tokenizer's); 0 = all
  /// Progress: called after each window with (windows done, windows total). Optional.
  std::function<void(int64_t, int64_t)> on_window;
};

struct PerplexityResult {
  double ppl = 0;        ///< exp(mean NLL)
  double ppl_err = 0;    ///< ppl · standard error of the mean NLL (llama.cpp's "±")
  double mean_nll = 0;   ///< nats per scored token
  int64_t n_scored = 0;  ///< tokens scored (= tokens.size() - 1)
  int64_t n_windows = 0;
  std::vector<double> nll;  ///< per scored target, in target order (target t = index + 1)
};

/// The window start positions for n_tokens tokens (see the header comment).
/// Errors: k3::Error for n_tokens < 2, n_ctx < 2 or a stride outside [1, n_ctx).
std::vector<int64_t> perplexity_windows(int64_t n_tokens, int64_t n_ctx, int64_t stride);

/// Scores `tokens` with `model` as defined above. Errors: k3::Error (bad options as for
/// perplexity_windows, "-c/--ctx-size", "--stride", "-b/--batch-size" named; ids out of range).
/// A NaN/Inf NLL is an error too, naming the position and (runtime/nonfinite.h) the first
/// non-finite intermediate of a replay of the window.
PerplexityResult perplexity(const Model& model, std::span<const int32_t> tokens, const PerplexityOptions& opt);

/// Unigram baseline on the same targets (tokens[1..]): exp of the mean of -log(count(t)/N) with
/// counts taken from those N targets themselves (an optimistic, in-sample unigram model).
/// Errors: k3::Error for fewer than 2 tokens.
double unigram_perplexity(std::span<const int32_t> tokens);

/// -log_softmax(row)[target] in double over row (fp32 logits). Errors: k3::Error for a target
/// outside the row.
double token_nll(std::span<const float> row, int32_t target);

}  // namespace k3
