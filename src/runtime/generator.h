// The generation loop of `k3 run` and `k3 chat`: prefill a prompt into a sequence, then sample +
// decode one token at a time until a stop id, the -n limit, a full context or a cancel request.
// The decode rules are runtime/sequence_decoder.h's (the same object decides for the Scheduler
// of `k3 serve`); this file holds the prefill and the lone sequence's forward calls.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/k3_model.h"
#include "runtime/prefix_cache.h"
#include "runtime/sampler.h"

namespace k3 {

class Speculator;       // runtime/speculative.h
class SequenceDecoder;  // runtime/sequence_decoder.h
struct DecodeLimits;    // runtime/sequence_decoder.h

/// Why generate() returned.
enum class StopReason { StopToken, MaxTokens, ContextFull, Cancelled };
const char* stop_reason_name(StopReason r);  ///< "stop token", "n-predict", "context full", "cancelled"

struct GenerateOptions {
  int64_t n_predict = 128;                    ///< max ids to sample; -1 = until a stop id or a full context
  int64_t n_ctx = 4096;                       ///< context limit (tokens in the sequence, prompt included)
  int64_t n_batch = 512;                      ///< prefill chunk (tokens per forward call), >= 1
  int64_t n_vocab = 0;                        ///< sample only ids [0, n_vocab) (the tokenizer's); 0 = all
  std::vector<int32_t> stop_ids;              ///< ids that end generation (returned, never fed/streamed)
  const std::atomic<bool>* cancel = nullptr;  ///< when set to true, stop before the next decode
  /// Called once after the prompt is prefilled, with the state at the end of the prompt (e.g. to
  /// keep a copy for prompt reuse). Optional.
  std::function<void(const SequenceState&)> on_prefilled;
  /// Prefix cache (prefix_cache.h), or null: the prompt resumes at its longest cached prefix
  /// and its blocks are stored (prefill_cached). `seq` must then be fresh (n_past 0).
  PrefixCache* cache = nullptr;
  /// When set, the decode loop is speculative (drafts verified in one forward, exact rollback;
  /// same ids as plain decoding at temp <= 0, same distribution otherwise). Not owned.
  Speculator* speculative = nullptr;
  /// Called with ("prefill", 0, prompt ids to compute) before the first prefill piece and after
  /// each piece with the ids computed so far; ids resumed from the prefix cache are not counted.
  /// Optional (a progress display).
  ProgressFn on_prefill_progress;
  /// Prompt rows given as vectors (images; runtime/image_prompt.h), positions relative to the
  /// prompt's first id. Must stay valid for the call.
  std::span<const EmbedRows> embeds;
  /// The prompt's images as the prefix cache keys them (positions relative to the prompt).
  std::span<const MediaKey> media;
};

struct GenerateResult {
  std::vector<int32_t> ids;  ///< sampled ids, the stop id (if any) last
  StopReason stop = StopReason::MaxTokens;
  int32_t stop_id = -1;  ///< the stop id when stop == StopToken
  int64_t n_prompt = 0;  ///< ids prefilled (computed) by this call
  int64_t n_reused = 0;  ///< prompt ids taken from the prefix cache instead
  double prompt_ms = 0;  ///< prefill wall time
  double gen_ms = 0;     ///< sampling + decode wall time
};

/// Appends `prompt` to `seq` (which may already hold earlier tokens) and generates.
/// `on_token(id)` is called for each sampled non-stop id, in order, before the next one is
/// computed (stream it); returning false stops with StopReason::Cancelled.
/// Every prompt id and every sampled id is given to sampler.accept() (llama.cpp's penalty history).
/// On return `seq` holds the prompt followed by every id of result.ids except the last one
/// (the last sampled id is never fed). Context: generation stops with ContextFull once the
/// sequence plus the pending id fill n_ctx tokens.
/// Errors (k3::Error, `seq` unchanged): empty prompt; seq.n_past() + prompt.size() >= n_ctx
/// ("prompt is N tokens, -c/--ctx-size is M"); n_batch < 1; n_vocab larger than the model's;
/// plus whatever Model::forward throws.
GenerateResult generate(const Model& model, SequenceState& seq, std::span<const int32_t> prompt, Sampler& sampler,
                        const GenerateOptions& opt, const std::function<bool(int32_t)>& on_token);

/// The SequenceDecoder limits of generate(): max_tokens = opt.n_predict, opt.n_ctx, `n_vocab`
/// (the resolved sampling range), opt.stop_ids.
DecodeLimits decode_limits(const GenerateOptions& opt, int64_t n_vocab);
/// generate()'s StopReason for a decoder's end (StopId -> StopToken; an open decoder -> MaxTokens).
StopReason stop_reason(const SequenceDecoder& dec);

/// Throws the k3::Error generate() throws when a prompt of n_prompt ids does not fit after
/// n_past ids in a context of n_ctx (n_past + n_prompt >= n_ctx), or is empty — so a caller can
/// check before printing anything.
void check_prompt_fits(int64_t n_past, int64_t n_prompt, int64_t n_ctx);

/// Feeds `tokens` into `seq` in chunks of n_batch and returns the logits of the last token
/// ([vocab] fp32). Errors: k3::Error for an empty `tokens` or n_batch < 1, and Model::forward's.
/// `progress` (may be empty): ("prefill", ids fed, tokens.size()) before the first chunk (0) and after each.
/// `embeds`: rows of `tokens` given as vectors (positions relative to tokens[0]).
std::vector<float> prefill(const Model& model, SequenceState& seq, std::span<const int32_t> tokens, int64_t n_batch,
                           const ProgressFn& progress = {}, std::span<const EmbedRows> embeds = {});

/// prefill() through a prefix cache: `seq` (fresh) resumes at cache.lookup(prompt) (the reused
/// count goes to *n_reused), the rest is fed in pieces of at most n_batch that also end at the
/// cache's snapshot points, and every full block (and the snapshots) is stored after each
/// piece. The blocks used are pinned in *pin (may be null). Returns the last token's logits.
/// With the cache's block size and n_batch multiples of the model's prefill_chunk, logits and
/// state are bit-identical to prefill() of the whole prompt.
/// Errors: as prefill(), and k3::Error when `seq` is not fresh.
std::vector<float> prefill_cached(const Model& model, PrefixCache& cache, SequenceState& seq,
                                  std::span<const int32_t> prompt, int64_t n_batch, PrefixCache::Pin* pin,
                                  int64_t* n_reused, const ProgressFn& progress = {},
                                  std::span<const EmbedRows> embeds = {}, std::span<const MediaKey> media = {});

}  // namespace k3
