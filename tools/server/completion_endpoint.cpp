// POST /v1/completions: a raw prompt (tokenized like `k3 run`: no [BOS], specials as plain
// text) or prompt ids -> scheduler -> text (specials flagged special dropped, as `k3 run`).
#include <algorithm>
#include <memory>
#include <optional>

#include "api_error.h"
#include "endpoints.h"
#include "generation.h"
#include "sse_writer.h"

namespace k3::server {
namespace {

struct CompletionStreamState {
  const ServeContext* ctx;
  HandleGuard guard;
  PlainTextDecoder dec;
  StopMatcher stops;
  ResponseMeta meta;
  bool want_logprobs;
  bool include_usage;
  std::string echo_text;
};

bool run_stream(CompletionStreamState& s, httplib::DataSink& sink) {
  const ServeContext& ctx = *s.ctx;
  SseWriter out(sink);
  auto write = [&](const std::string& t) { return out.write(t); };
  if (!s.echo_text.empty() && !write(sse(text_completion(s.meta, s.echo_text, "", Json(), Json())))) return false;
  int64_t offset = static_cast<int64_t>(s.echo_text.size());
  const GenerationResult r = drive_generation(
      ctx, *s.guard.h, s.dec, s.stops, s.want_logprobs,
      [&](const StreamDelta& d, const std::vector<TokenLogprob>& lps) {
        Json lp = lps.empty() ? Json() : completion_logprobs(*ctx.tok, lps, offset);
        offset += static_cast<int64_t>(d.content.size());
        return write(sse(text_completion(s.meta, d.content, "", std::move(lp), Json())));
      },
      [&] { return out.alive(); });
  current_request_log().generated_tokens = r.n_generated;
  const std::string fr = finish_reason_of(r, false);
  ctx.metrics->count_finish(r.client_gone ? "abort" : fr);
  if (r.client_gone) return false;
  if (r.finish == FinishReason::Error) {
    write(sse(error_body(generation_error(r))));
  } else {
    Json last = text_completion(s.meta, "", fr, Json(), Json());
    add_draft_timings(ctx, r, last);
    write(sse(last));
    if (s.include_usage) write(sse(usage_chunk(s.meta, "text_completion", usage_json(r.n_prompt, r.n_generated))));
  }
  write(sse_done());
  out.done();
  return true;
}

// A non-streaming answer (see handle_completion).
struct CompletionJsonState {
  const ServeContext* ctx;
  HandleGuard guard;
  PlainTextDecoder dec;
  StopMatcher stops;
  ResponseMeta meta;
  bool want_logprobs;
  std::string echo_text;
};

bool run_json(CompletionJsonState& s, httplib::DataSink& sink) {
  const ServeContext& ctx = *s.ctx;
  SseWriter out(sink, std::chrono::milliseconds(1000), kJsonHeartbeat);
  std::string text;
  std::vector<TokenLogprob> lps;
  const GenerationResult r = drive_generation(
      ctx, *s.guard.h, s.dec, s.stops, s.want_logprobs,
      [&](const StreamDelta& d, const std::vector<TokenLogprob>& l) {
        text += d.content;
        lps.insert(lps.end(), l.begin(), l.end());
        return out.alive();
      },
      [&] { return out.alive(); });
  current_request_log().generated_tokens = r.n_generated;
  if (r.client_gone) {
    ctx.metrics->count_finish("abort");
    return false;
  }
  if (r.finish == FinishReason::Error) {
    ctx.metrics->count_finish("error");
    out.write(error_body(generation_error(r))
                  .dump(-1, ' ', false, Json::error_handler_t::replace));
  } else {
    const std::string fr = finish_reason_of(r, false);
    ctx.metrics->count_finish(fr);
    Json j = text_completion(
        s.meta, s.echo_text + text, fr,
        s.want_logprobs ? completion_logprobs(*ctx.tok, lps, static_cast<int64_t>(s.echo_text.size())) : Json(),
        usage_json(r.n_prompt, r.n_generated));
    add_draft_timings(ctx, r, j);
    if (!out.write(j.dump(-1, ' ', false, Json::error_handler_t::replace))) return false;
  }
  out.done();
  return true;
}

}  // namespace

void handle_completion(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const Json body = parse_body(req.body);
  CompletionRequest cr = parse_completion_request(body, ctx.defaults);
  check_model(ctx, cr.gen.model);
  // A prompt text stops being tokenized past max(-c, --max-tokenize-tokens) ids: it cannot fit
  // the context, and the ids held stay bounded (make_seq_request counts a shorter one exactly).
  std::vector<int32_t> prompt = cr.prompt_ids;
  if (cr.prompt_text) {
    const int64_t bound = std::max<int64_t>(ctx.n_ctx, ctx.max_tokenize_tokens);
    std::optional<std::vector<int32_t>> ids = ctx.tok->encode_at_most(*cr.prompt_text, static_cast<size_t>(bound));
    if (!ids) throw context_length_error(ctx.n_ctx, "more than " + std::to_string(bound));
    prompt = std::move(*ids);
  }
  SeqRequest q = make_seq_request(ctx, prompt, cr.gen);
  if (ctx.policy) q.cache_partition = cache_partition(*ctx.policy, request_head(req).authorization, cr.gen.user);
  std::string echo_text;
  if (cr.echo) echo_text = cr.prompt_text ? *cr.prompt_text : ctx.tok->decode(prompt, /*skip_special=*/true);
  const bool want_lp = cr.gen.top_logprobs >= 0;
  const ResponseMeta meta = ResponseMeta::make("cmpl-", ctx.model_id);
  std::shared_ptr<SeqHandle> h = submit_request(ctx, std::move(q));

  if (!cr.gen.stream) {
    // One JSON object, sent through a chunked provider once the sequence is queued: while it
    // runs, a "\n" heartbeat (leading whitespace the client's JSON parser skips) goes out every
    // second, so a client that hung up is noticed and its sequence cancelled.
    auto state = std::make_shared<CompletionJsonState>(CompletionJsonState{
        &ctx, HandleGuard{&ctx, h}, PlainTextDecoder(*ctx.tok), StopMatcher(cr.gen.stop), meta, want_lp, echo_text});
    res.set_chunked_content_provider("application/json", [state](size_t, httplib::DataSink& sink) {
      return guarded_provider(sink, false, [&] { return run_json(*state, sink); });
    });
    return;
  }
  auto state = std::make_shared<CompletionStreamState>(
      CompletionStreamState{&ctx, HandleGuard{&ctx, h}, PlainTextDecoder(*ctx.tok), StopMatcher(cr.gen.stop), meta,
                            want_lp, cr.gen.include_usage, echo_text});
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", [state](size_t, httplib::DataSink& sink) {
    return guarded_provider(sink, true, [&] { return run_stream(*state, sink); });
  });
}

}  // namespace k3::server
