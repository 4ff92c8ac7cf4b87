// OpenAI response JSON builders.
#include "openai_response.h"

#include <chrono>

#include "tokenizer/utf8.h"

namespace k3::server {
namespace {

Json token_entry(const Tokenizer& tok, int32_t id, float lp) {
  const std::string_view b = tok.token_bytes(id);
  Json bytes = Json::array();
  for (unsigned char c : b) bytes.push_back(static_cast<int>(c));
  return Json{{"token", tok::utf8_sanitize(b)}, {"logprob", lp}, {"bytes", bytes}};
}

}  // namespace

Json error_body(const ApiError& e) {
  return Json{{"error",
               {{"message", e.what()},
                {"type", e.type()},
                {"param", e.param().empty() ? Json() : Json(e.param())},
                {"code", e.status()}}}};
}

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t reasoning_tokens) {
  Json u{{"prompt_tokens", prompt_tokens},
         {"completion_tokens", completion_tokens},
         {"total_tokens", prompt_tokens + completion_tokens}};
  if (reasoning_tokens >= 0) u["completion_tokens_details"] = {{"reasoning_tokens", reasoning_tokens}};
  return u;
}

Json chat_logprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& lps) {
  Json content = Json::array();
  for (const auto& t : lps) {
    Json e = token_entry(tok, t.id, t.logprob);
    Json top = Json::array();
    for (const auto& [id, lp] : t.top) top.push_back(token_entry(tok, id, lp));
    e["top_logprobs"] = top;
    content.push_back(std::move(e));
  }
  return content;
}

Json completion_logprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& lps, int64_t offset0) {
  Json tokens = Json::array(), lp = Json::array(), top = Json::array(), off = Json::array();
  int64_t o = offset0;
  for (const auto& t : lps) {
    const std::string_view b = tok.token_bytes(t.id);
    tokens.push_back(tok::utf8_sanitize(b));
    lp.push_back(t.logprob);
    Json m = Json::object();
    for (const auto& [id, l] : t.top) m[tok::utf8_sanitize(tok.token_bytes(id))] = l;
    top.push_back(std::move(m));
    off.push_back(o);
    if (!tok.is_special(t.id)) o += static_cast<int64_t>(b.size());
  }
  return Json{{"tokens", tokens}, {"token_logprobs", lp}, {"top_logprobs", top}, {"text_offset", off}};
}

Json chat_message(const std::string& reasoning, const std::string& content, const std::vector<ToolCall>& calls) {
  Json m{{"role", "assistant"},
         {"content", content.empty() && !calls.empty() ? Json() : Json(content)},
         {"reasoning_content", reasoning.empty() ? Json() : Json(reasoning)}};
  if (!calls.empty()) {
    Json tc = Json::array();
    for (const auto& c : calls)
      tc.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    m["tool_calls"] = tc;
  }
  return m;
}

Json chat_delta(const StreamDelta& d, bool with_role) {
  Json j = Json::object();
  if (with_role) j["role"] = "assistant";
  if (with_role && d.empty()) j["content"] = "";
  if (!d.reasoning.empty()) j["reasoning_content"] = d.reasoning;
  if (!d.content.empty()) j["content"] = d.content;
  if (!d.tool_calls.empty()) {
    Json tc = Json::array();
    for (const auto& t : d.tool_calls) {
      if (t.first)
        tc.push_back({{"index", t.index},
                      {"id", t.id},
                      {"type", "function"},
                      {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
      else tc.push_back({{"index", t.index}, {"function", {{"arguments", t.arguments}}}});
    }
    j["tool_calls"] = tc;
  }
  return j;
}

ResponseMeta ResponseMeta::make(const std::string& prefix, const std::string& model) {
  ResponseMeta m;
  m.id = prefix + new_tool_call_id().substr(5);
  m.created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  m.model = model;
  return m;
}

Json chat_completion(const ResponseMeta& m, Json message, const std::string& finish_reason, Json logprobs, Json usage) {
  Json choice{{"index", 0},
              {"message", std::move(message)},
              {"logprobs", std::move(logprobs)},
              {"finish_reason", finish_reason}};
  return Json{{"id", m.id},       {"object", "chat.completion"},      {"created", m.created},
              {"model", m.model}, {"choices", Json::array({choice})}, {"usage", std::move(usage)}};
}

Json chat_chunk(const ResponseMeta& m, Json delta, const std::string& finish_reason, Json logprobs) {
  Json choice{{"index", 0},
              {"delta", std::move(delta)},
              {"logprobs", std::move(logprobs)},
              {"finish_reason", finish_reason.empty() ? Json() : Json(finish_reason)}};
  return Json{{"id", m.id},
              {"object", "chat.completion.chunk"},
              {"created", m.created},
              {"model", m.model},
              {"choices", Json::array({choice})}};
}

Json usage_chunk(const ResponseMeta& m, const char* object, Json usage) {
  return Json{{"id", m.id},       {"object", object},         {"created", m.created},
              {"model", m.model}, {"choices", Json::array()}, {"usage", std::move(usage)}};
}

Json text_completion(const ResponseMeta& m, const std::string& text, const std::string& finish_reason, Json logprobs,
                     Json usage) {
  Json choice{{"index", 0},
              {"text", text},
              {"logprobs", std::move(logprobs)},
              {"finish_reason", finish_reason.empty() ? Json() : Json(finish_reason)}};
  Json j{{"id", m.id},
         {"object", "text_completion"},
         {"created", m.created},
         {"model", m.model},
         {"choices", Json::array({choice})}};
  if (!usage.is_null()) j["usage"] = std::move(usage);
  return j;
}

std::string sse(const Json& j) { return "data: " + j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n"; }

}  // namespace k3::server
