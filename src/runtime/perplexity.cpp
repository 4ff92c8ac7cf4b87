// Sliding-window perplexity (definition in perplexity.h).
#include "runtime/perplexity.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "core/error.h"
#include "runtime/nonfinite.h"

namespace k3 {

std::vector<int64_t> perplexity_windows(int64_t n_tokens, int64_t n_ctx, int64_t stride) {
  if (n_ctx < 2)
    throw Error("-c/--ctx-size: perplexity needs a window of at least 2 tokens, found " + std::to_string(n_ctx));
  if (stride < 1 || stride >= n_ctx)
    throw Error("--stride: expected 1 <= stride < ctx-size (" + std::to_string(n_ctx) + "), found " +
                std::to_string(stride));
  if (n_tokens < 2)
    throw Error("perplexity: the text has " + std::to_string(n_tokens) + " token(s); at least 2 are needed");
  std::vector<int64_t> starts{0};
  int64_t scored_end = std::min(n_ctx, n_tokens);  // targets [1, scored_end) are scored
  while (scored_end < n_tokens) {
    const int64_t s = starts.back() + stride;
    starts.push_back(s);
    scored_end = std::min(s + n_ctx, n_tokens);
  }
  return starts;
}

double token_nll(std::span<const float> row, int32_t target) {
  if (target < 0 || static_cast<std::size_t>(target) >= row.size())
    throw Error("perplexity: token id " + std::to_string(target) + " is outside the vocabulary [0, " +
                std::to_string(row.size()) + ")");
  double mx = -INFINITY;
  for (float v : row) mx = std::max(mx, static_cast<double>(v));
  double z = 0.0;
  for (float v : row) z += std::exp(static_cast<double>(v) - mx);
  return -(static_cast<double>(row[static_cast<std::size_t>(target)]) - mx - std::log(z));
}

double unigram_perplexity(std::span<const int32_t> tokens) {
  if (tokens.size() < 2)
    throw Error("perplexity: the text has " + std::to_string(tokens.size()) + " token(s); at least 2 are needed");
  std::unordered_map<int32_t, int64_t> count;
  for (std::size_t i = 1; i < tokens.size(); ++i) ++count[tokens[i]];
  const double n = static_cast<double>(tokens.size() - 1);
  double sum = 0.0;  // sum over targets of -log p(t) = sum over ids of -c·log(c/n)
  for (const auto& [id, c] : count) sum -= static_cast<double>(c) * std::log(static_cast<double>(c) / n);
  return std::exp(sum / n);
}

PerplexityResult perplexity(const Model& model, std::span<const int32_t> tokens, const PerplexityOptions& opt) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t stride = opt.stride == 0 ? opt.n_ctx / 2 : opt.stride;
  const std::vector<int64_t> starts = perplexity_windows(n, opt.n_ctx, stride);
  if (opt.n_batch < 1) throw Error("-b/--batch-size: expected >= 1, found " + std::to_string(opt.n_batch));
  const int64_t vocab = model.config().vocab_size;
  const int64_t n_vocab = opt.n_vocab > 0 ? opt.n_vocab : vocab;
  if (n_vocab > vocab)
    throw Error("perplexity: the tokenizer has " + std::to_string(n_vocab) + " ids but the model's vocab_size is " +
                std::to_string(vocab));

  PerplexityResult r;
  r.n_windows = static_cast<int64_t>(starts.size());
  r.nll.reserve(static_cast<std::size_t>(n - 1));
  int64_t scored_end = 1;  // targets [1, scored_end) are done
  for (std::size_t w = 0; w < starts.size(); ++w) {
    const int64_t s = starts[w];
    const int64_t e = std::min(s + opt.n_ctx, n);
    // Targets [scored_end, e) need the logits of positions [scored_end - 1, e - 1).
    const int64_t first_pos = scored_end - 1;
    SequenceState seq = model.new_sequence();
    for (int64_t b = s; b < e - 1; b += opt.n_batch) {  // the last token's logits are never needed
      const int64_t be = std::min(b + opt.n_batch, e - 1);
      const bool want = be > first_pos;
      std::vector<float> logits;
      try {
        logits =
            model.forward(seq, tokens.subspan(static_cast<std::size_t>(b), static_cast<std::size_t>(be - b)), want);
      } catch (const Error& e) {
        throw Error(explain_forward_error(
            e, model, tokens.subspan(static_cast<std::size_t>(s), static_cast<std::size_t>(be - s))));
      }
      if (!want) continue;
      for (int64_t p = std::max(b, first_pos); p < be; ++p) {
        const float* row = logits.data() + static_cast<std::size_t>(p - b) * static_cast<std::size_t>(vocab);
        const std::span<const float> srow(row, static_cast<std::size_t>(n_vocab));
        const double nll = token_nll(srow, tokens[static_cast<std::size_t>(p + 1)]);
        if (!std::isfinite(nll)) {
          const int64_t bad = first_nonfinite(srow);
          throw Error("perplexity: non-finite result at token position " + std::to_string(p) + " (window " +
                      std::to_string(w + 1) + " starting at " + std::to_string(s) + "): " +
                      (bad >= 0 ? "logit of id " + std::to_string(bad) + " is " +
                                      std::to_string(srow[static_cast<std::size_t>(bad)])
                                : "NLL is " + std::to_string(nll)) +
                      "; " +
                      locate_nonfinite(
                          model, tokens.subspan(static_cast<std::size_t>(s), static_cast<std::size_t>(p + 1 - s))));
        }
        r.nll.push_back(nll);
      }
    }
    scored_end = e;
    if (opt.on_window) opt.on_window(static_cast<int64_t>(w + 1), r.n_windows);
  }

  r.n_scored = static_cast<int64_t>(r.nll.size());
  double sum = 0.0, sum2 = 0.0;
  for (double v : r.nll) {
    sum += v;
    sum2 += v * v;
  }
  const double cnt = static_cast<double>(r.n_scored);
  r.mean_nll = sum / cnt;
  r.ppl = std::exp(r.mean_nll);
  const double var = sum2 / cnt - r.mean_nll * r.mean_nll;
  r.ppl_err = (var > 0 && r.n_scored > 1) ? r.ppl * std::sqrt(var / (cnt - 1)) : 0.0;
  return r;
}

}  // namespace k3
