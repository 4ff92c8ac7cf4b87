// POST /v1/completions: a raw prompt (tokenized like `k3 run`: no [BOS], specials as plain
// text) or prompt ids -> scheduler -> text (specials flagged special dropped, as `k3 run`).
#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

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

Json with_index(Json j, size_t i) {
  if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) j["choices"][0]["index"] = i;
  return j;
}

// A list of prompts: one choice per prompt (index i), streamed one after the other; their
// sequences run together in the batch.
bool run_stream(std::vector<CompletionStreamState>& all, httplib::DataSink& sink) {
  SseWriter out(sink);
  auto write = [&](const std::string& t) { return out.write(t); };
  int64_t n_prompt = 0, n_gen = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    CompletionStreamState& s = all[i];
    const ServeContext& ctx = *s.ctx;
    if (!s.echo_text.empty() && !write(sse(with_index(text_completion(s.meta, s.echo_text, "", Json(), Json()), i))))
      return false;
    int64_t offset = static_cast<int64_t>(s.echo_text.size());
    const GenerationResult r = drive_generation(
        ctx, *s.guard.h, s.dec, s.stops, s.want_logprobs,
        [&](const StreamDelta& d, const std::vector<TokenLogprob>& lps) {
          Json lp = lps.empty() ? Json() : completion_logprobs(*ctx.tok, lps, offset);
          offset += static_cast<int64_t>(d.content.size());
          return write(sse(with_index(text_completion(s.meta, d.content, "", std::move(lp), Json()), i)));
        },
        [&] { return out.alive(); });
    n_prompt += r.n_prompt;
    n_gen += r.n_generated;
    current_request_log().generated_tokens = n_gen;
    const std::string fr = finish_reason_of(r, false);
    ctx.metrics->count_finish(r.client_gone ? "abort" : fr);
    if (r.client_gone) return false;
    if (r.finish == FinishReason::Error) {
      write(sse(error_body(generation_error(r))));
      write(sse_done());
      out.done();
      return true;
    }
    Json last = with_index(text_completion(s.meta, "", fr, Json(), Json()), i);
    add_draft_timings(ctx, r, last);
    write(sse(last));
  }
  if (all[0].include_usage) write(sse(usage_chunk(all[0].meta, "text_completion", usage_json(n_prompt, n_gen))));
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

bool run_json(std::vector<CompletionJsonState>& all, httplib::DataSink& sink) {
  SseWriter out(sink, std::chrono::milliseconds(1000), kJsonHeartbeat);
  Json j;
  int64_t n_prompt = 0, n_gen = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    CompletionJsonState& s = all[i];
    const ServeContext& ctx = *s.ctx;
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
    n_prompt += r.n_prompt;
    n_gen += r.n_generated;
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
    const std::string fr = finish_reason_of(r, false);
    ctx.metrics->count_finish(fr);
    Json one = text_completion(
        s.meta, s.echo_text + text, fr,
        s.want_logprobs ? completion_logprobs(*ctx.tok, lps, static_cast<int64_t>(s.echo_text.size())) : Json(),
        Json());
    if (i == 0) {
      j = std::move(one);
      add_draft_timings(ctx, r, j);
    } else {
      j["choices"].push_back(with_index(std::move(one), i)["choices"][0]);
    }
  }
  j["usage"] = usage_json(n_prompt, n_gen);
  if (!out.write(j.dump(-1, ' ', false, Json::error_handler_t::replace))) return false;
  out.done();
  return true;
}

}  // namespace

void handle_completion(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const Json body = parse_body(req.body);
  CompletionRequest cr = parse_completion_request(body, ctx.defaults);
  check_model(ctx, cr.gen.model);
  const bool want_lp = cr.gen.top_logprobs >= 0;
  const ResponseMeta meta = ResponseMeta::make("cmpl-", ctx.model_id);
  std::vector<SeqRequest> qs;
  std::vector<std::string> echoes;
  for (const CompletionPrompt& p : cr.prompts) {
    // A prompt text stops being tokenized past max(-c, --max-tokenize-tokens) ids: it cannot fit
    // the context, and the ids held stay bounded (make_seq_request counts a shorter one exactly).
    std::vector<int32_t> prompt = p.ids;
    if (p.text) {
      const int64_t bound = std::max<int64_t>(ctx.n_ctx, ctx.max_tokenize_tokens);
      std::optional<std::vector<int32_t>> ids = ctx.tok->encode_at_most(*p.text, static_cast<size_t>(bound));
      if (!ids) throw context_length_error(ctx.n_ctx, "more than " + std::to_string(bound));
      prompt = std::move(*ids);
    }
    SeqRequest q = make_seq_request(ctx, prompt, cr.gen);
    if (ctx.policy) q.cache_partition = cache_partition(*ctx.policy, request_head(req).authorization, cr.gen.user);
    qs.push_back(std::move(q));
    echoes.push_back(!cr.echo ? std::string() : p.text ? *p.text : ctx.tok->decode(prompt, /*skip_special=*/true));
  }
  std::vector<std::shared_ptr<SeqHandle>> hs;
  for (auto& q : qs) hs.push_back(submit_request(ctx, std::move(q)));

  if (!cr.gen.stream) {
    // One JSON object, sent through a chunked provider once the sequences are queued: while they
    // run, a "\n" heartbeat (leading whitespace the client's JSON parser skips) goes out every
    // second, so a client that hung up is noticed and its sequences cancelled.
    auto states = std::make_shared<std::vector<CompletionJsonState>>();
    for (size_t i = 0; i < hs.size(); ++i)
      states->push_back(CompletionJsonState{&ctx, HandleGuard{&ctx, hs[i]}, PlainTextDecoder(*ctx.tok),
                                            StopMatcher(cr.gen.stop), meta, want_lp, echoes[i]});
    res.set_chunked_content_provider("application/json", [states](size_t, httplib::DataSink& sink) {
      return guarded_provider(sink, false, [&] { return run_json(*states, sink); });
    });
    return;
  }
  auto states = std::make_shared<std::vector<CompletionStreamState>>();
  for (size_t i = 0; i < hs.size(); ++i)
    states->push_back(CompletionStreamState{&ctx, HandleGuard{&ctx, hs[i]}, PlainTextDecoder(*ctx.tok),
                                            StopMatcher(cr.gen.stop), meta, want_lp, cr.gen.include_usage, echoes[i]});
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", [states](size_t, httplib::DataSink& sink) {
    return guarded_provider(sink, true, [&] { return run_stream(*states, sink); });
  });
}

}  // namespace k3::server
