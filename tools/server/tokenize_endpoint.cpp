// POST /tokenize, POST /detokenize (vLLM shapes, spec serving.md).
#include "api_error.h"
#include "endpoints.h"
#include "openai_response.h"
#include "tokenizer/chat_k3.h"
#include "tokenizer/utf8.h"

namespace k3::server {

void check_model(const ServeContext& ctx, const std::string& model) {
  if (!model.empty() && model != ctx.model_id)
    throw ApiError(404, "The model `" + model + "` does not exist. Valid aliases: " + ctx.model_id + ".", "model",
                   "NotFoundError");
}

std::vector<int32_t> render_chat_request(const ServeContext& ctx, const ChatRequest& cr) {
  try {
    return render_chat(*ctx.tok, cr.messages, cr.chat);
  } catch (const k3::Error& e) {
    const std::string m = e.what();
    throw bad_request(m.find("response_format") != std::string::npos ? "response_format" : "messages", m);
  }
}

void send_json(httplib::Response& res, const Json& j, int status) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
}

void handle_tokenize(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const Json body = parse_body(req.body);
  std::vector<int32_t> ids;
  if (body.contains("messages")) {
    // Reuse the chat parser for messages, tools and the template switches.
    Json chat = body;
    chat.erase("stream");
    const ChatRequest cr = parse_chat_request(chat, ctx.defaults);
    ids = render_chat_request(ctx, cr);
  } else if (body.contains("prompt")) {
    if (!body["prompt"].is_string()) throw bad_request("prompt", "prompt: expected a string");
    ids = ctx.tok->encode(body["prompt"].get<std::string>());
  } else {
    throw bad_request("prompt", "expected \"prompt\" (a string) or \"messages\" (a list)");
  }
  if (body.contains("model") && body["model"].is_string()) check_model(ctx, body["model"]);
  send_json(res, Json{{"count", ids.size()}, {"max_model_len", ctx.n_ctx}, {"tokens", ids}, {"token_strs", nullptr}});
}

void handle_detokenize(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const Json body = parse_body(req.body);
  if (!body.contains("tokens") || !body["tokens"].is_array())
    throw bad_request("tokens", "tokens: required (a list of token ids)");
  std::vector<int32_t> ids;
  const Json& t = body["tokens"];
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (!t[i].is_number_integer() || t[i].get<int64_t>() < 0 || t[i].get<int64_t>() >= ctx.tok->vocab_size())
      throw bad_request("tokens", "tokens[" + std::to_string(i) + "]: expected a token id in [0, " +
                                      std::to_string(ctx.tok->vocab_size()) + "), found " + t[i].dump());
    ids.push_back(static_cast<int32_t>(t[i].get<int64_t>()));
  }
  send_json(res, Json{{"prompt", tok::utf8_sanitize(ctx.tok->decode(ids))}});
}

}  // namespace k3::server
