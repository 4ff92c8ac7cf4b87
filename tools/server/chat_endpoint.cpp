// POST /v1/chat/completions: messages -> K3 chat prompt (render_chat) -> scheduler -> deltas.
#include <memory>
#include <vector>

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

// Choice i of an n > 1 request: its chunks and choices carry "index": i.
Json with_index(Json j, size_t i) {
  if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) j["choices"][0]["index"] = i;
  return j;
}

// The choices are streamed one after the other (their sequences run together in the batch; the
// later ones' events wait in their handles), each chunk with its choice's index.
bool run_stream(std::vector<ChatStreamState>& all, httplib::DataSink& sink) {
  SseWriter out(sink);
  auto write = [&](const std::string& t) { return out.write(t); };
  int64_t n_prompt = 0, n_gen = 0, n_reason = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    ChatStreamState& s = all[i];
    const ServeContext& ctx = *s.ctx;
    SeqHandle& h = *s.guard.h;
    if (!write(sse(with_index(chat_chunk(s.meta, chat_delta({}, true), ""), i)))) return false;
    const GenerationResult r = drive_generation(
        ctx, h, s.parser, s.stops, s.want_logprobs,
        [&](const StreamDelta& d, const std::vector<TokenLogprob>& lps) {
          return write(sse(with_index(
              chat_chunk(s.meta, chat_delta(d, false), "", lps.empty() ? Json() : logprobs_json(ctx, lps)), i)));
        },
        [&] { return out.alive(); });
    n_gen += r.n_generated;
    n_prompt = r.n_prompt;
    n_reason += r.reasoning_tokens;
    current_request_log().generated_tokens = n_gen;
    const std::string fr = finish_reason_of(r, !s.parser.tool_calls().empty());
    ctx.metrics->count_finish(r.client_gone ? "abort" : fr);
    if (r.client_gone) return false;
    if (r.finish == FinishReason::Error) {
      write(sse(error_body(generation_error(r))));
      write(sse_done());
      out.done();
      return true;
    }
    Json last = with_index(chat_chunk(s.meta, Json::object(), fr), i);
    add_draft_timings(ctx, r, last);
    write(sse(last));
  }
  if (all[0].include_usage)
    write(sse(usage_chunk(all[0].meta, "chat.completion.chunk", usage_json(n_prompt, n_gen, n_reason))));
  write(sse_done());
  out.done();
  return true;
}

// A non-streaming answer (see handle_chat): every choice, in index order.
bool run_json(std::vector<ChatStreamState>& all, httplib::DataSink& sink) {
  SseWriter out(sink, std::chrono::milliseconds(1000), kJsonHeartbeat);
  Json j;
  int64_t n_prompt = 0, n_gen = 0, n_reason = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    ChatStreamState& s = all[i];
    const ServeContext& ctx = *s.ctx;
    StreamDelta whole;
    std::vector<TokenLogprob> lps;
    const GenerationResult r = drive_generation(
        ctx, *s.guard.h, s.parser, s.stops, s.want_logprobs,
        [&](const StreamDelta& d, const std::vector<TokenLogprob>& l) {
          whole.append(d);
          lps.insert(lps.end(), l.begin(), l.end());
          return out.alive();
        },
        [&] { return out.alive(); });
    n_gen += r.n_generated;
    n_prompt = r.n_prompt;
    n_reason += r.reasoning_tokens;
    current_request_log().generated_tokens = n_gen;
    if (r.client_gone) {
      ctx.metrics->count_finish("abort");
      return false;
    }
    if (r.finish == FinishReason::Error) {
      ctx.metrics->count_finish("error");
      out.write(error_body(generation_error(r))
                    .dump(-1, ' ', false, Json::error_handler_t::replace));
      out.done();
      return true;
    }
    const std::string fr = finish_reason_of(r, !s.parser.tool_calls().empty());
    ctx.metrics->count_finish(fr);
    Json one = chat_completion(s.meta, chat_message(whole.reasoning, whole.content, s.parser.tool_calls()), fr,
                               s.want_logprobs ? logprobs_json(ctx, lps) : Json(), Json());
    if (i == 0) {
      j = std::move(one);
      add_draft_timings(ctx, r, j);
    } else {
      j["choices"].push_back(with_index(std::move(one), i)["choices"][0]);
    }
  }
  j["usage"] = usage_json(n_prompt, n_gen, n_reason);
  if (!out.write(j.dump(-1, ' ', false, Json::error_handler_t::replace))) return false;
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
  // n > 1: n sequences sampled together in the batch, choice i with seed + i.
  std::vector<SeqRequest> qs;
  for (int64_t i = 0; i < cr.gen.n; ++i) {
    SeqRequest q = make_seq_request(ctx, prompt, cr.gen);
    q.sampling.seed += static_cast<uint64_t>(i);
    q.images = images;
    if (ctx.policy) q.cache_partition = cache_partition(*ctx.policy, request_head(req).authorization, cr.gen.user);
    qs.push_back(std::move(q));
  }
  const bool want_lp = cr.gen.top_logprobs >= 0;
  const ResponseMeta meta = ResponseMeta::make("chatcmpl-", ctx.model_id);
  auto states = std::make_shared<std::vector<ChatStreamState>>();
  for (auto& q : qs) {
    std::shared_ptr<SeqHandle> h = submit_request(ctx, std::move(q));
    states->push_back(ChatStreamState{&ctx, HandleGuard{&ctx, h}, K3StreamParser(*ctx.tok, cr.chat.thinking),
                                      StopMatcher(cr.gen.stop), meta, want_lp, cr.gen.stream && cr.gen.include_usage});
  }

  if (!cr.gen.stream) {
    // One JSON object, sent through a chunked provider once the sequences are queued: while they
    // run, a "\n" heartbeat (leading whitespace the client's JSON parser skips) goes out every
    // second, so a client that hung up is noticed and its sequences cancelled.
    res.set_chunked_content_provider("application/json", [states](size_t, httplib::DataSink& sink) {
      return guarded_provider(sink, false, [&] { return run_json(*states, sink); });
    });
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", [states](size_t, httplib::DataSink& sink) {
    return guarded_provider(sink, true, [&] { return run_stream(*states, sink); });
  });
}

}  // namespace k3::server
