// POST /v1/responses, POST /v1/messages, POST /v1/messages/count_tokens, and the
// llama-server compatibility endpoints (GET /props, GET /version, POST /apply-template, the
// 404s of heads K3 does not have). The agent APIs are translated onto the chat completions
// request (agent_api.h) and run exactly as /v1/chat/completions runs it.
#include <memory>

#include "agent_api.h"
#include "api_error.h"
#include "endpoints.h"
#include "generation.h"
#include "sse_writer.h"

namespace k3::server {
namespace {

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A parsed ChatRequest submitted as handle_chat submits it.
std::shared_ptr<SeqHandle> submit_chat(const ServeContext& ctx, const httplib::Request& req, const ChatRequest& cr,
                                       int64_t* n_prompt) {
  check_model(ctx, cr.gen.model);
  std::vector<int32_t> prompt = render_chat_request(ctx, cr);
  *n_prompt = static_cast<int64_t>(prompt.size());
  SeqRequest q = make_seq_request(ctx, std::move(prompt), cr.gen);
  if (ctx.policy) q.cache_partition = cache_partition(*ctx.policy, request_head(req).authorization, cr.gen.user);
  return submit_request(ctx, std::move(q));
}

// The typed events of a Responses / Messages stream, each as one SSE event; a non-streamed
// answer sends none (only its heartbeat). False when the client is gone.
bool write_stream_events(SseWriter& out, bool sse, const std::vector<Json>& events) {
  if (!sse) return out.alive();
  for (const Json& e : events)
    if (!out.write(sse_event(e))) return false;
  return true;
}

// ---- Responses -------------------------------------------------------------------------------

struct ResponsesState {
  const ServeContext* ctx;
  HandleGuard guard;
  K3StreamParser parser;
  StopMatcher stops;
  ResponsesStream stream;
  Json chat_messages;
  bool store;
  bool sse;
};

bool run_responses(ResponsesState& s, httplib::DataSink& sink) {
  const ServeContext& ctx = *s.ctx;
  SseWriter out = s.sse ? SseWriter(sink) : SseWriter(sink, std::chrono::milliseconds(1000), kJsonHeartbeat);
  auto write_events = [&](const std::vector<Json>& ev) { return write_stream_events(out, s.sse, ev); };
  if (!write_events(s.stream.start())) return false;
  const GenerationResult r = drive_generation(
      ctx, *s.guard.h, s.parser, s.stops, false,
      [&](const StreamDelta& d, const std::vector<TokenLogprob>&) { return write_events(s.stream.push(d)); },
      [&] { return out.alive(); });
  current_request_log().generated_tokens = r.n_generated;
  const std::string fr = finish_reason_of(r, !s.parser.tool_calls().empty());
  ctx.metrics->count_finish(r.client_gone ? "abort" : fr);
  if (r.client_gone) return false;
  if (r.finish == FinishReason::Error) {
    const ApiError e = generation_error(r);  // 503 when the group of ranks failed, else 500
    if (s.sse)
      out.write(sse_event(Json{{"type", "error"}, {"code", e.status() == 503 ? "unavailable" : "server_error"},
                               {"message", e.what()}, {"param", nullptr}}));
    else out.write(error_body(e).dump(-1, ' ', false, Json::error_handler_t::replace));
    out.done();
    return true;
  }
  const std::vector<Json> last = s.stream.finish(r.finish == FinishReason::Length ? "max_output_tokens" : "",
                                                 responses_usage(r.n_prompt, r.n_generated, r.reasoning_tokens));
  if (s.store && ctx.responses)
    ctx.responses->put(s.stream.response()["id"], responses_history(s.chat_messages, s.stream.response()["output"]));
  if (s.sse) {
    if (!write_events(last)) return false;
  } else {
    Json j = s.stream.response();
    add_draft_timings(ctx, r, j);
    if (!out.write(j.dump(-1, ' ', false, Json::error_handler_t::replace))) return false;
  }
  out.done();
  return true;
}

// ---- Messages --------------------------------------------------------------------------------

struct MessagesState {
  const ServeContext* ctx;
  HandleGuard guard;
  K3StreamParser parser;
  StopMatcher stops;
  MessagesStream stream;
  int64_t n_prompt;
  bool sse;
};

bool run_messages(MessagesState& s, httplib::DataSink& sink) {
  const ServeContext& ctx = *s.ctx;
  SseWriter out = s.sse ? SseWriter(sink) : SseWriter(sink, std::chrono::milliseconds(1000), kJsonHeartbeat);
  auto write_events = [&](const std::vector<Json>& ev) { return write_stream_events(out, s.sse, ev); };
  if (!write_events(s.stream.start(s.n_prompt))) return false;
  const GenerationResult r = drive_generation(
      ctx, *s.guard.h, s.parser, s.stops, false,
      [&](const StreamDelta& d, const std::vector<TokenLogprob>&) { return write_events(s.stream.push(d)); },
      [&] { return out.alive(); });
  current_request_log().generated_tokens = r.n_generated;
  const std::string fr = finish_reason_of(r, !s.parser.tool_calls().empty());
  ctx.metrics->count_finish(r.client_gone ? "abort" : fr);
  if (r.client_gone) return false;
  if (r.finish == FinishReason::Error) {
    const Json err = anthropic_error_body(generation_error(r));
    out.write(s.sse ? sse_event(err) : err.dump(-1, ' ', false, Json::error_handler_t::replace));
    out.done();
    return true;
  }
  const std::string stop_reason = r.stop_string                    ? "stop_sequence"
                                  : r.finish == FinishReason::Length ? "max_tokens"
                                  : fr == "tool_calls"               ? "tool_use"
                                                                     : "end_turn";
  const std::vector<Json> last =
      s.stream.finish(stop_reason, r.stop_string ? s.stops.matched_stop() : "", r.n_prompt, r.n_generated);
  if (s.sse) {
    if (!write_events(last)) return false;
  } else {
    Json j = s.stream.message();
    add_draft_timings(ctx, r, j);
    if (!out.write(j.dump(-1, ' ', false, Json::error_handler_t::replace))) return false;
  }
  out.done();
  return true;
}

template <class State, class Run>
void start_provider(httplib::Response& res, std::shared_ptr<State> state, bool sse, Run run) {
  if (sse) res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(sse ? "text/event-stream" : "application/json",
                                   [state, sse, run](size_t, httplib::DataSink& sink) {
                                     return guarded_provider(sink, sse, [&] { return run(*state, sink); });
                                   });
}

}  // namespace

void handle_responses(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const Json body = parse_body(req.body);
  const std::string prev = responses_previous_id(body);
  Json history = Json::array();
  if (!prev.empty()) {
    std::optional<Json> h = ctx.responses ? ctx.responses->get(prev) : std::nullopt;
    if (!h)
      throw ApiError(404,
                     "previous_response_id: response '" + prev +
                         "' not found (not stored: store false, another server, or evicted past --responses-store)",
                     "previous_response_id");
    history = std::move(*h);
  }
  const ResponsesTranslation tr = translate_responses_request(body, history);
  const ChatRequest cr = parse_translated_responses(tr.chat_body, ctx.defaults);
  int64_t n_prompt = 0;
  const ResponseMeta meta = ResponseMeta::make("resp_", ctx.model_id);
  Json resp{{"id", meta.id},
            {"object", "response"},
            {"created_at", meta.created},
            {"status", "in_progress"},
            {"background", false},
            {"error", nullptr},
            {"incomplete_details", nullptr},
            {"model", ctx.model_id},
            {"output", Json::array()},
            {"service_tier", "default"},
            {"usage", nullptr}};
  for (auto it = tr.echo.begin(); it != tr.echo.end(); ++it) resp[it.key()] = *it;
  if (resp["temperature"].is_null()) resp["temperature"] = cr.gen.sampling.temp;
  if (resp["top_p"].is_null()) resp["top_p"] = cr.gen.sampling.top_p;
  std::shared_ptr<SeqHandle> h = submit_chat(ctx, req, cr, &n_prompt);
  Json kept = cr.messages;  // the history a later previous_response_id continues: no instructions
  if (tr.instructions_first && kept.is_array() && !kept.empty()) kept.erase(kept.begin());
  auto state = std::make_shared<ResponsesState>(ResponsesState{&ctx, HandleGuard{&ctx, h},
                                                               K3StreamParser(*ctx.tok, cr.chat.thinking),
                                                               StopMatcher(cr.gen.stop), ResponsesStream(resp),
                                                               std::move(kept), tr.store, cr.gen.stream});
  start_provider(res, state, cr.gen.stream, run_responses);
}

void handle_messages(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const Json body = parse_body(req.body);
  const MessagesTranslation tr = translate_messages_request(body);
  const ChatRequest cr = parse_chat_request(tr.chat_body, ctx.defaults);
  int64_t n_prompt = 0;
  std::shared_ptr<SeqHandle> h = submit_chat(ctx, req, cr, &n_prompt);
  Json msg{{"id", ResponseMeta::make("msg_", "").id},
           {"type", "message"},
           {"role", "assistant"},
           {"model", tr.model},
           {"content", Json::array()},
           {"stop_reason", nullptr},
           {"stop_sequence", nullptr},
           {"usage", {{"input_tokens", n_prompt}, {"output_tokens", 0}}}};
  auto state = std::make_shared<MessagesState>(MessagesState{&ctx, HandleGuard{&ctx, h},
                                                             K3StreamParser(*ctx.tok, cr.chat.thinking),
                                                             StopMatcher(cr.gen.stop), MessagesStream(msg), n_prompt,
                                                             cr.gen.stream});
  start_provider(res, state, cr.gen.stream, run_messages);
}

void handle_count_tokens(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const Json body = parse_body(req.body);
  const MessagesTranslation tr = translate_messages_request(body, /*count_only=*/true);
  const ChatRequest cr = parse_chat_request(tr.chat_body, ctx.defaults);
  check_model(ctx, cr.gen.model);
  send_json(res, Json{{"input_tokens", render_chat_request(ctx, cr).size()}});
}

void handle_props(const ServeContext& ctx, const httplib::Request&, httplib::Response& res) {
  const SamplerParams& s = ctx.defaults.sampling;
  const int64_t n_slots = ctx.scheduler ? ctx.scheduler->options().n_parallel : 1;
  send_json(res, Json{{"default_generation_settings",
                       {{"n_ctx", ctx.n_ctx},
                        {"params",
                         {{"temperature", s.temp},
                          {"top_k", s.top_k},
                          {"top_p", s.top_p},
                          {"min_p", s.min_p},
                          {"n_predict", ctx.defaults.max_tokens}}}}},
                      {"total_slots", n_slots},
                      {"model_alias", ctx.model_id},
                      {"n_ctx_per_slot", ctx.n_ctx},
                      {"chat_template", "k3 (built in: tokenizer/chat_k3)"},
                      {"modalities", {{"vision", false}, {"audio", false}}},
                      {"build_info", "k3.cpp"}});
}

void handle_version(const ServeContext& ctx, const httplib::Request&, httplib::Response& res) {
  send_json(res, Json{{"version", "k3.cpp"}, {"model", ctx.model_id}, {"created", now_s()}});
}

void handle_apply_template(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res) {
  Json body = parse_body(req.body);
  body.erase("stream");
  const ChatRequest cr = parse_chat_request(body, ctx.defaults);
  check_model(ctx, cr.gen.model);
  send_json(res, Json{{"prompt", ctx.tok->decode(render_chat_request(ctx, cr))}});
}

void handle_no_head(const ServeContext&, const httplib::Request& req, httplib::Response&) {
  const bool rerank = req.path.find("rerank") != std::string::npos;
  const bool infill = req.path.find("infill") != std::string::npos;
  throw ApiError(404,
                 req.path + ": K3 has no " +
                     (rerank   ? "reranking head (a classifier over query-document pairs)"
                      : infill ? "fill-in-the-middle format (no FIM markers in its tokenizer)"
                               : "embedding head (it is a generative model; use a dedicated embedding model)") +
                     ", so k3 serve does not offer this endpoint",
                 "", "NotFoundError");
}

}  // namespace k3::server
