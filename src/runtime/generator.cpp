// Prefill + decode loop.
#include "runtime/generator.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/image_prompt.h"
#include "runtime/sequence_decoder.h"
#include "runtime/speculative.h"
#include "runtime/stats.h"

namespace k3 {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::StopToken: return "stop token";
    case StopReason::MaxTokens: return "n-predict";
    case StopReason::ContextFull: return "context full";
    case StopReason::Cancelled: return "cancelled";
  }
  return "?";
}

std::vector<float> prefill(const Model& model, SequenceState& seq, std::span<const int32_t> tokens, int64_t n_batch,
                           const ProgressFn& progress, std::span<const EmbedRows> embeds) {
  if (tokens.empty()) throw Error("prefill: the prompt is empty (expected at least 1 token)");
  if (n_batch < 1) throw Error("-b/--batch-size: expected >= 1, found " + std::to_string(n_batch));
  std::vector<float> logits;
  if (progress) progress("prefill", 0, static_cast<int64_t>(tokens.size()));
  for (std::size_t i = 0; i < tokens.size(); i += static_cast<std::size_t>(n_batch)) {
    const std::size_t n = std::min(tokens.size() - i, static_cast<std::size_t>(n_batch));
    const std::vector<EmbedRows> e =
        embeds_in_range(embeds, static_cast<int64_t>(i), static_cast<int64_t>(n), model.config().hidden_size);
    logits = model.forward(seq, tokens.subspan(i, n), e, false);
    if (progress) progress("prefill", static_cast<int64_t>(i + n), static_cast<int64_t>(tokens.size()));
  }
  return logits;
}

std::vector<float> prefill_cached(const Model& model, PrefixCache& cache, SequenceState& seq,
                                  std::span<const int32_t> prompt, int64_t n_batch, PrefixCache::Pin* pin,
                                  int64_t* n_reused, const ProgressFn& progress, std::span<const EmbedRows> embeds,
                                  std::span<const MediaKey> media) {
  if (prompt.empty()) throw Error("prefill: the prompt is empty (expected at least 1 token)");
  if (n_batch < 1) throw Error("-b/--batch-size: expected >= 1, found " + std::to_string(n_batch));
  if (seq.n_past() != 0)
    throw Error("prefill_cached: the sequence must be fresh (it holds " + std::to_string(seq.n_past()) + " tokens)");
  const int64_t n = static_cast<int64_t>(prompt.size());
  const int64_t B = cache.options().block_tokens;
  int64_t pos = cache.lookup(prompt, &seq, pin, 0, media);
  const int64_t reused = pos;
  if (n_reused != nullptr) *n_reused = pos;
  const std::vector<int64_t> cuts = cache.snapshot_points(n);
  std::vector<float> logits;
  if (progress && pos < n) progress("prefill", 0, n - reused);
  while (pos < n) {
    int64_t end = std::min(n, pos + n_batch);
    for (int64_t c : cuts)
      if (c > pos) {
        end = std::min(end, c);
        break;
      }
    const std::vector<EmbedRows> e = embeds_in_range(embeds, pos, end - pos, model.config().hidden_size);
    logits = model.forward(seq, prompt.subspan(static_cast<size_t>(pos), static_cast<size_t>(end - pos)), e, false);
    pos = end;
    if (progress) progress("prefill", pos - reused, n - reused);
    if (pos % B == 0 || pos == n) cache.store(prompt.first(static_cast<size_t>(pos)), n, seq, pin, 0, media);
  }
  return logits;
}

DecodeLimits decode_limits(const GenerateOptions& opt, int64_t n_vocab) {
  DecodeLimits lim;
  lim.max_tokens = opt.n_predict;
  lim.n_ctx = opt.n_ctx;
  lim.n_vocab = n_vocab;
  lim.stop_ids = opt.stop_ids;
  return lim;
}

StopReason stop_reason(const SequenceDecoder& dec) {
  switch (dec.end()) {
    case DecodeEnd::StopId: return StopReason::StopToken;
    case DecodeEnd::ContextFull: return StopReason::ContextFull;
    case DecodeEnd::Cancelled: return StopReason::Cancelled;
    case DecodeEnd::MaxTokens:
    case DecodeEnd::None: break;
  }
  return StopReason::MaxTokens;
}

void check_prompt_fits(int64_t n_past, int64_t n_prompt, int64_t n_ctx) {
  if (n_prompt <= 0) throw Error("generate: the prompt is empty (expected at least 1 token)");
  if (n_past + n_prompt >= n_ctx) {
    std::string what = "prompt is " + std::to_string(n_prompt) + " tokens";
    if (n_past > 0) what += " (+ " + std::to_string(n_past) + " already in the conversation)";
    throw Error(what + ", -c/--ctx-size is " + std::to_string(n_ctx) +
                ": the prompt must be shorter than the context (raise -c or shorten the prompt)");
  }
}

GenerateResult generate(const Model& model, SequenceState& seq, std::span<const int32_t> prompt, Sampler& sampler,
                        const GenerateOptions& opt, const std::function<bool(int32_t)>& on_token) {
  const int64_t vocab = model.config().vocab_size;
  const int64_t n_vocab = opt.n_vocab > 0 ? opt.n_vocab : vocab;
  if (n_vocab > vocab)
    throw Error("generate: the tokenizer has " + std::to_string(n_vocab) + " ids but the model's vocab_size is " +
                std::to_string(vocab));
  if (opt.n_predict < -1)
    throw Error("-n/--n-predict: expected -1 (unlimited) or >= 0, found " + std::to_string(opt.n_predict));
  check_prompt_fits(seq.n_past(), static_cast<int64_t>(prompt.size()), opt.n_ctx);

  GenerateResult r;
  r.n_prompt = static_cast<int64_t>(prompt.size());
  Timer t;
  PrefixCache::Pin pin;  // the cached blocks this generation uses
  std::vector<float> logits;
  if (opt.cache != nullptr) {
    logits = prefill_cached(model, *opt.cache, seq, prompt, opt.n_batch, &pin, &r.n_reused, opt.on_prefill_progress,
                            opt.embeds, opt.media);
    r.n_prompt -= r.n_reused;
  } else {
    logits = prefill(model, seq, prompt, opt.n_batch, opt.on_prefill_progress, opt.embeds);
  }
  for (int32_t id : prompt) sampler.accept(id);
  r.prompt_ms = t.ms();
  if (opt.on_prefilled) opt.on_prefilled(seq);

  t.restart();
  if (opt.speculative) {
    opt.speculative->decode(model, seq, prompt, sampler, opt, std::move(logits), on_token, r);
    r.gen_ms = t.ms();
    return r;
  }
  // Plain decoding: one row per step, the emitted id fed by the next forward.
  SequenceDecoder dec(decode_limits(opt, n_vocab), model.prefill_grid());
  // A cancel is seen before the first id (during prefill: nothing sampled) and after each
  // streamed id, before the next forward, so that "the last sampled id is never fed" always
  // holds (chat keys its saved state on it).
  if (opt.n_predict == 0) dec.finish(DecodeEnd::MaxTokens);
  else if (opt.cancel && opt.cancel->load()) dec.finish(DecodeEnd::Cancelled);
  const EmitFn emit = [&](int32_t id, size_t) { return on_token(id) && !(opt.cancel && opt.cancel->load()); };
  const Draft none;
  while (!dec.done()) {
    const std::span<const float> row(logits.data(), static_cast<std::size_t>(n_vocab));
    const DecodeStep st = dec.step(sampler, std::span<const std::span<const float>>(&row, 1), none, seq.n_past(), emit);
    r.ids.insert(r.ids.end(), st.ids.begin(), st.ids.begin() + st.n_emitted);
    if (dec.done()) break;
    logits = model.forward(seq, std::span<const int32_t>(&r.ids.back(), 1), false);
  }
  r.stop = stop_reason(dec);
  r.stop_id = dec.stop_id();
  r.gen_ms = t.ms();
  return r;
}

}  // namespace k3
