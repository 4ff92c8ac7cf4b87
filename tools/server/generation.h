// Runs one submitted sequence for an endpoint: turns the SeqEvents of a SeqHandle into
// StreamDeltas (through an OutputDecoder and the request's stop strings), feeds the latency
// histograms, and cancels the sequence when a stop string matches or the client goes away.
// Also the request -> SeqRequest steps both endpoints share (context check, max_tokens,
// forced output, submit with 429/400 mapping).
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "api_error.h"
#include "openai_response.h"
#include "serve_context.h"
#include "stop_matcher.h"
#include "stream_parser.h"

namespace k3::server {

/// How a generation ended.
struct GenerationResult {
  FinishReason finish = FinishReason::Stop;
  bool stop_string = false;  ///< ended by a text stop string (finish_reason "stop")
  bool client_gone = false;  ///< emit() failed or alive() turned false; the sequence was cancelled
  std::string error;         ///< when finish == Error
  bool unavailable = false;  ///< with Error: the engine's group of ranks failed (503, SeqEvent::unavailable)
  int64_t n_prompt = 0;
  int64_t n_generated = 0;  ///< ids generated (up to the stop-string match; a stop id included)
  int64_t reasoning_tokens = 0;
  int64_t draft_n = 0;           ///< draft ids verified for this sequence (speculative decoding)
  int64_t draft_n_accepted = 0;  ///< of those, accepted
  double prompt_ms = 0;          ///< submit -> first generated id (queue wait + prefill), ms
  double predicted_ms = 0;       ///< first generated id -> done, ms
};

/// The error of a generation that ended with FinishReason::Error: 503 "The engine is
/// unavailable: ..." when the group of ranks failed (GenerationResult::unavailable), else 500
/// "generation failed: ...".
ApiError generation_error(const GenerationResult& r);

/// Adds llama-server's `"timings"` to a final response object or chunk: prompt_n (prompt ids),
/// prompt_ms (submit to the first generated id, queueing included), prompt_per_token_ms,
/// prompt_per_second, predicted_n (generated ids), predicted_ms (first id to done),
/// predicted_per_token_ms, predicted_per_second (rates 0 when the time or count is 0); with
/// speculative decoding on (the scheduler has a drafter) also draft_n and draft_n_accepted.
void add_draft_timings(const ServeContext& ctx, const GenerationResult& r, Json& j);

/// Receives each non-empty delta with the logprobs of the ids it came from; returns false when
/// the client is gone.
using EmitFn = std::function<bool(const StreamDelta&, const std::vector<TokenLogprob>&)>;

/// Pops events until the done event. Stop strings apply to the content text. `alive` (optional)
/// is polled while no event arrives and after each event that emit() did not already write
/// (a false answer cancels the sequence: client_gone). The decoder's finish() output is emitted before returning
/// (unless a stop string matched or the client is gone).
GenerationResult drive_generation(const ServeContext& ctx, SeqHandle& h, OutputDecoder& dec, StopMatcher& stops,
                                  bool want_logprobs, const EmitFn& emit, const std::function<bool()>& alive = {});

/// The OpenAI finish_reason of a result: "stop", "length", "tool_calls" (stop with tool calls),
/// "abort" (cancelled by the server), "error".
std::string finish_reason_of(const GenerationResult& r, bool has_tool_calls);

/// The OpenAI-style 400 (param "input_tokens") for a prompt that leaves no room in the context
/// of `n_ctx` tokens; `n_prompt_text` is the prompt's length as the message says it ("812", or
/// "more than 4096" when tokenization stopped early).
ApiError context_length_error(int64_t n_ctx, const std::string& n_prompt_text);

/// Fills a SeqRequest for `prompt`: checks the context (ApiError 400 in vLLM's words, param
/// "input_tokens"), resolves max_tokens (the request's, else the server default; silently
/// clamped to the room left in the context, n_ctx - prompt, as llama-server does: such a
/// sequence ends with finish_reason "length"), sampling, stop ids, logprobs and the forced output (text encoded
/// with specials allowed, or ids range-checked; param "k3_forced_output").
SeqRequest make_seq_request(const ServeContext& ctx, std::vector<int32_t> prompt, const GenerationFields& g);

/// Submits and registers the handle. Errors: ApiError 429 (queue full), 503 (shutting down),
/// 400 (the scheduler's validation message).
std::shared_ptr<SeqHandle> submit_request(const ServeContext& ctx, SeqRequest req);

/// Unregisters a handle when the endpoint is done with it (cancelling it if still running).
struct HandleGuard {
  HandleGuard(const ServeContext* c, std::shared_ptr<SeqHandle> handle) : ctx(c), h(std::move(handle)) {}
  HandleGuard(HandleGuard&& o) noexcept : ctx(o.ctx), h(std::move(o.h)) {}
  HandleGuard(const HandleGuard&) = delete;
  HandleGuard& operator=(const HandleGuard&) = delete;
  HandleGuard& operator=(HandleGuard&&) = delete;
  ~HandleGuard() {
    if (h) {
      h->cancel();
      ctx->handles->remove(h);
    }
  }
  const ServeContext* ctx;
  std::shared_ptr<SeqHandle> h;
};

}  // namespace k3::server
