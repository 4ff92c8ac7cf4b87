// drive_generation and the shared SeqRequest preparation.
#include "generation.h"

#include <algorithm>

#include "api_error.h"

namespace k3::server {
namespace {

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

RequestLog& current_request_log() {
  thread_local RequestLog log;
  return log;
}

GenerationResult drive_generation(const ServeContext& ctx, SeqHandle& h, OutputDecoder& dec, StopMatcher& stops,
                                  bool want_logprobs, const EmitFn& emit, const std::function<bool()>& alive) {
  GenerationResult r;
  bool first = true;
  std::chrono::steady_clock::time_point last, first_time;
  int64_t n_ids = 0;
  while (true) {
    std::optional<SeqEvent> e = h.next(std::chrono::milliseconds(100));
    if (!e) {
      if (!r.client_gone && alive && !alive()) {
        r.client_gone = true;
        h.cancel();
      }
      continue;
    }
    if (e->done) {
      r.finish = e->finish;
      r.error = e->error;
      r.unavailable = e->unavailable;
      r.n_prompt = e->n_prompt;
      r.n_generated = r.stop_string ? n_ids : std::max<int64_t>(e->n_generated, n_ids);
      if (!first) {
        r.prompt_ms = 1e3 * seconds(first_time - h.submitted());
        r.predicted_ms = 1e3 * seconds(e->time - first_time);
      } else {
        r.prompt_ms = 1e3 * seconds(e->time - h.submitted());
      }
      r.draft_n = e->n_drafted;
      r.draft_n_accepted = e->n_draft_accepted;
      if (!first) ctx.metrics->observe_e2e(seconds(e->time - h.submitted()));
      break;
    }
    if (r.stop_string || r.client_gone) continue;  // draining after our cancel
    if (first) {
      ctx.metrics->observe_ttft(seconds(e->time - h.submitted()));
      first_time = e->time;
    }
    else ctx.metrics->observe_itl(seconds(e->time - last));
    first = false;
    last = e->time;
    ++n_ids;
    StreamDelta d = dec.push(e->id);
    if (ctx.defaults.reasoning_in_content && !d.reasoning.empty()) {  // --reasoning-format none
      d.content = d.reasoning + d.content;
      d.reasoning.clear();
    }
    if (stops.active()) {
      d.content = stops.push(d.content);
      if (stops.matched()) {
        r.stop_string = true;
        h.cancel();
      }
    }
    std::vector<TokenLogprob> lps;
    if (want_logprobs) lps.push_back({e->id, e->logprob, e->top});
    if ((!d.empty() || !lps.empty()) && !emit(d, lps)) {
      r.client_gone = true;
      h.cancel();
    } else if (alive && !alive()) {
      // Also polled between events: a non-streaming answer writes nothing but heartbeats
      // until the end, so only alive() notices a client that hung up while tokens flow.
      r.client_gone = true;
      h.cancel();
    }
  }
  r.reasoning_tokens = dec.reasoning_tokens();
  if (!r.stop_string && !r.client_gone) {
    StreamDelta f = dec.finish();
    f.content = stops.push(f.content);
    if (stops.matched()) r.stop_string = true;
    else f.content += stops.flush();
    if (!f.empty() && !emit(f, {})) r.client_gone = true;
  }
  return r;
}

void add_draft_timings(const ServeContext& ctx, const GenerationResult& r, Json& j) {
  auto per_token = [](double ms, int64_t n) { return n > 0 ? ms / static_cast<double>(n) : 0.0; };
  auto per_second = [](double ms, int64_t n) { return ms > 0 ? 1e3 * static_cast<double>(n) / ms : 0.0; };
  Json t{{"prompt_n", r.n_prompt},
         {"prompt_ms", r.prompt_ms},
         {"prompt_per_token_ms", per_token(r.prompt_ms, r.n_prompt)},
         {"prompt_per_second", per_second(r.prompt_ms, r.n_prompt)},
         {"predicted_n", r.n_generated},
         {"predicted_ms", r.predicted_ms},
         {"predicted_per_token_ms", per_token(r.predicted_ms, r.n_generated)},
         {"predicted_per_second", per_second(r.predicted_ms, r.n_generated)}};
  if (ctx.scheduler && ctx.scheduler->options().speculation) {
    t["draft_n"] = r.draft_n;
    t["draft_n_accepted"] = r.draft_n_accepted;
  }
  j["timings"] = std::move(t);
}

std::string finish_reason_of(const GenerationResult& r, bool has_tool_calls) {
  if (r.stop_string) return "stop";
  switch (r.finish) {
    case FinishReason::Stop: return has_tool_calls ? "tool_calls" : "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "abort";
    case FinishReason::Error: return "error";
  }
  return "stop";
}

ApiError context_length_error(int64_t n_ctx, const std::string& n_prompt_text) {
  return ApiError(400,
                  "This model's maximum context length is " + std::to_string(n_ctx) +
                      " tokens. However, your prompt contains " + n_prompt_text +
                      " input tokens, which leaves no room for generated tokens. Please reduce the length of the "
                      "prompt (or restart the server with a larger -c/--ctx-size).",
                  "input_tokens");
}

ApiError generation_error(const GenerationResult& r) {
  if (r.unavailable) return ApiError(503, "The engine is unavailable: " + r.error, "", "ServiceUnavailableError");
  return ApiError(500, "generation failed: " + r.error);
}

SeqRequest make_seq_request(const ServeContext& ctx, std::vector<int32_t> prompt, const GenerationFields& g) {
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt < 1) throw bad_request("prompt", "the prompt is empty (expected at least 1 token)");
  if (n_prompt >= ctx.n_ctx) throw context_length_error(ctx.n_ctx, std::to_string(n_prompt));
  for (std::size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= ctx.tok->vocab_size())
      throw bad_request("prompt", "prompt[" + std::to_string(i) + "]: token id " + std::to_string(prompt[i]) +
                                      " is outside the vocabulary [0, " + std::to_string(ctx.tok->vocab_size()) + ")");
  SeqRequest q;
  const int64_t room = ctx.n_ctx - n_prompt;
  int64_t mt = g.max_tokens.value_or(ctx.defaults.max_tokens);
  // A max_tokens beyond the room left in the context is clamped to that room, not refused (as
  // llama-server does; vLLM answers 400). The sequence then ends by the clamped limit, which
  // the scheduler reports as FinishReason::Length: finish_reason "length", and usage counts the
  // tokens actually generated (tests/python/test_server_openai.py checks both).
  if (mt < 0 || mt > room) mt = room;
  q.max_tokens = std::max<int64_t>(mt, 1);
  q.prompt = std::move(prompt);
  q.sampling = g.sampling;
  if (!g.ignore_eos) q.stop_ids = ctx.stop_ids;
  q.n_vocab = ctx.tok->vocab_size();
  q.top_logprobs = g.top_logprobs;
  q.speculative = g.speculative;
  if (g.forced_output) {
    const auto& f = *g.forced_output;
    if (f.is_string()) {
      q.forced_ids = ctx.tok->encode(f.get<std::string>(), AllowedSpecials::all());
    } else {
      for (const auto& x : f) {
        const int64_t v = x.get<int64_t>();
        if (v < 0 || v >= ctx.tok->vocab_size())
          throw bad_request("k3_forced_output", "k3_forced_output: token id " + std::to_string(v) +
                                                    " is outside the vocabulary [0, " +
                                                    std::to_string(ctx.tok->vocab_size()) + ")");
        q.forced_ids.push_back(static_cast<int32_t>(v));
      }
    }
  }
  for (const auto& [id, b] : g.sampling.logit_bias)
    if (id >= ctx.tok->vocab_size())
      throw bad_request("logit_bias", "logit_bias: token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                          std::to_string(ctx.tok->vocab_size()) + ")");
  if (!g.constraint.empty()) {
    if (ctx.constraints == nullptr)
      throw bad_request(g.constraint_param, g.constraint_param + ": constrained decoding is not available here");
    try {
      q.constraint = ctx.constraints->compile(g.constraint);
      q.constraint_spec = g.constraint;
    } catch (const k3::Error& e) {
      throw bad_request(g.constraint_param, g.constraint_param + ": " + e.what());
    }
  }
  try {
    q.sampling.validate();
  } catch (const k3::Error& e) {
    throw bad_request("sampling", e.what());
  }
  return q;
}

std::shared_ptr<SeqHandle> submit_request(const ServeContext& ctx, SeqRequest req) {
  current_request_log().prompt_tokens = static_cast<int64_t>(req.prompt.size());
  std::shared_ptr<SeqHandle> h;
  try {
    h = ctx.scheduler->submit(std::move(req));
  } catch (const QueueFullError& e) {
    // The scheduler's message already ends with "retry later".
    throw ApiError(429, std::string("The server is busy: ") + e.what(), "", "RateLimitError");
  } catch (const k3::Error& e) {
    const std::string m = e.what();
    if (m.find("shut") != std::string::npos) throw ApiError(503, "The server is shutting down: " + m);
    throw ApiError(400, m);
  }
  ctx.handles->add(h);
  return h;
}

}  // namespace k3::server
