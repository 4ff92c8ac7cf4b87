// POST /v1/chat/completions: messages -> K3 chat prompt (render_chat) -> scheduler -> deltas.
#include <memory>

#include "api_error.h"
#include "endpoints.h"
#include "generation.h"
#include "sse_writer.h"
#include "tokenizer/chat_k3.h"

namespace k3::server {
namespace {

// Everything a streamed answer needs after the handler returns.
struct ChatStreamState {
  const ServeContext* ctx;
  HandleGuard guard;
  K3StreamParser parser;
  StopMatcher stops;
  ResponseMeta meta;
  bool want_logprobs;
  bool include_usage;
};

Json logprobs_json(const ServeContext& ctx, const std::vector<TokenLogprob>& lps) {
  return Json{{"content", chat_logprobs(*ctx.tok, lps)}};
}

bool run_stream(ChatStreamState& s, httplib::DataSink& sink) {
  const ServeContext& ctx = *s.ctx;
  SeqHandle& h = *s.guard.h;
  SseWriter out(sink);
  auto write = [&](const std::string& t) { return out.write(t); };
  if (!write(sse(chat_chunk(s.meta, chat_delta({}, true), "")))) return false;
  const GenerationResult r = drive_generation(
      ctx, h, s.parser, s.stops, s.want_logprobs,
      [&](const StreamDelta& d, const std::vector<TokenLogprob>& lps) {
        return write(sse(chat_chunk(s.meta, chat_delta(d, false), "", lps.empty() ? Json() : logprobs_json(ctx, lps))));
      },
      [&] { return out.alive(); });
  current_request_log().generated_tokens = r.n_generated;
  const std::string fr = finish_reason_of(r, !s.parser.tool_calls().empty());
  ctx.metrics->count_finish(r.client_gone ? "abort" : fr);
  if (r.client_gone) return false;
  if (r.finish == FinishReason::Error) {
    write(sse(error_body(generation_error(r))));
  } else {
    Json last = chat_chunk(s.meta, Json::object(), fr);
    add_draft_timings(ctx, r, last);
    write(sse(last));
    if (s.include_usage)
      write(
          sse(usage_chunk(s.meta, "chat.completion.chunk", usage_json(r.n_prompt, r.n_generated, r.reasoning_tokens))));
  }
  write(sse_done());
  out.done();
  return true;
}

// A non-streaming answer (see handle_chat).
bool run_json(ChatStreamState& s, httplib::DataSink& sink) {
  const ServeContext& ctx = *s.ctx;
  SseWriter out(sink, std::chrono::milliseconds(1000), kJsonHeartbeat);
  StreamDelta all;
  std::vector<TokenLogprob> lps;
  const GenerationResult r = drive_generation(
      ctx, *s.guard.h, s.parser, s.stops, s.want_logprobs,
      [&](const StreamDelta& d, const std::vector<TokenLogprob>& l) {
        all.append(d);
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
    const std::string fr = finish_reason_of(r, !s.parser.tool_calls().empty());
    ctx.metrics->count_finish(fr);
    Json j = chat_completion(s.meta, chat_message(all.reasoning, all.content, s.parser.tool_calls()), fr,
                             s.want_logprobs ? logprobs_json(ctx, lps) : Json(),
                             usage_json(r.n_prompt, r.n_generated, r.reasoning_tokens));
    add_draft_timings(ctx, r, j);
    if (!out.write(j.dump(-1, ' ', false, Json::error_handler_t::replace))) return false;
  }
  out.done();
  return true;
}

}  // namespace

void handle_chat(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const Json body = parse_body(req.body);
  ChatRequest cr = parse_chat_request(body, ctx.defaults);
  check_model(ctx, cr.gen.model);
  std::vector<int32_t> prompt;
  std::shared_ptr<const ImagePrompt> images;
  prompt = render_chat_request_images(ctx, cr, &images);
  SeqRequest q = make_seq_request(ctx, std::move(prompt), cr.gen);
  q.images = std::move(images);
  if (ctx.policy) q.cache_partition = cache_partition(*ctx.policy, request_head(req).authorization, cr.gen.user);
  const bool want_lp = cr.gen.top_logprobs >= 0;
  const ResponseMeta meta = ResponseMeta::make("chatcmpl-", ctx.model_id);
  std::shared_ptr<SeqHandle> h = submit_request(ctx, std::move(q));

  if (!cr.gen.stream) {
    // One JSON object, sent through a chunked provider once the sequence is queued: while it
    // runs, a "\n" heartbeat (leading whitespace the client's JSON parser skips) goes out every
    // second, so a client that hung up is noticed and its sequence cancelled.
    auto state = std::make_shared<ChatStreamState>(ChatStreamState{&ctx, HandleGuard{&ctx, h},
                                                                   K3StreamParser(*ctx.tok, cr.chat.thinking),
                                                                   StopMatcher(cr.gen.stop), meta, want_lp, false});
    res.set_chunked_content_provider("application/json", [state](size_t, httplib::DataSink& sink) {
      return guarded_provider(sink, false, [&] { return run_json(*state, sink); });
    });
    return;
  }
  auto state = std::make_shared<ChatStreamState>(
      ChatStreamState{&ctx, HandleGuard{&ctx, h}, K3StreamParser(*ctx.tok, cr.chat.thinking), StopMatcher(cr.gen.stop),
                      meta, want_lp, cr.gen.include_usage});
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", [state](size_t, httplib::DataSink& sink) {
    return guarded_provider(sink, true, [&] { return run_stream(*state, sink); });
  });
}

}  // namespace k3::server
