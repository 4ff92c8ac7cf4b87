// POST /tokenize, POST /detokenize (vLLM shapes, spec serving.md).
#include <algorithm>
#include <cstdio>
#include <optional>

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

std::vector<int32_t> render_chat_request_images(const ServeContext& ctx, ChatRequest& cr,
                                                std::shared_ptr<const ImagePrompt>* images, bool encode) {
  *images = nullptr;
  const std::vector<ImageBytes> bytes = take_request_images(cr.messages, ctx.image_parts);
  if (bytes.empty()) return render_chat_request(ctx, cr);
  if (ctx.vision == nullptr)
    throw bad_request("messages", bytes[0].name +
                                      ": this model has no vision tower (a text-only checkpoint), so it cannot take "
                                      "images; send text only");
  if (ctx.n_ranks > 1)
    throw bad_request("messages", bytes[0].name + ": images are not supported yet when k3 serve runs on " +
                                      std::to_string(ctx.n_ranks) + " MPI ranks (run it as one process)");
  try {
    auto ip = std::make_shared<ImagePrompt>(image_prompt_from_bytes(*ctx.tok, ctx.vision, ctx.hidden_size, cr.messages,
                                                                    cr.chat, bytes, ctx.image_config, ctx.image_limits,
                                                                    encode));
    std::vector<int32_t> ids = ip->ids;
    *images = std::move(ip);
    return ids;
  } catch (const k3::Error& e) {
    const std::string m = e.what();
    throw bad_request(m.find("response_format") != std::string::npos ? "response_format" : "messages", m);
  }
}

void send_json(httplib::Response& res, const Json& j, int status) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
}

namespace {

/// A reservation of /tokenize work on the server's TokenizeBudget, returned on scope exit.
class TokenizeReservation {
 public:
  TokenizeReservation(const ServeContext& ctx, int64_t n) : budget_(ctx.tokenize_budget.get()), n_(n) {
    const int64_t cap = 2 * ctx.max_tokenize_tokens;
    if (!budget_->try_take(n_, cap))
      throw ApiError(429,
                     "the server is tokenizing other large texts (" + std::to_string(budget_->used()) + " of its " +
                         std::to_string(cap) + " tokens of /tokenize work, twice " +
                         "--max-tokenize-tokens, are reserved); retry later",
                     "", "RateLimitError");
  }
  ~TokenizeReservation() { budget_->give(n_); }
  TokenizeReservation(const TokenizeReservation&) = delete;
  TokenizeReservation& operator=(const TokenizeReservation&) = delete;

 private:
  TokenizeBudget* budget_;
  int64_t n_;
};

/// 413 for a text over --max-tokenize-tokens; `found` says how many ids it holds.
ApiError too_many_tokens(const ServeContext& ctx, const std::string& param, const std::string& found) {
  return ApiError(413,
                  param + ": " + found +
                      " tokens, more than one /tokenize request may produce (--max-tokenize-tokens " +
                      std::to_string(ctx.max_tokenize_tokens) + "); split the text",
                  param);
}

}  // namespace

void handle_tokenize(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res) {
  // A text of B bytes holds at most 3B + the chat template's ids (each id covers >= 1 byte of
  // the text after invalid UTF-8 became U+FFFD): small requests reserve little of the budget.
  const int64_t bound = std::min<int64_t>(ctx.max_tokenize_tokens, 3 * static_cast<int64_t>(req.body.size()) + 4096);
  const TokenizeReservation reservation(ctx, bound);
  const Json body = parse_body(req.body);
  if (body.contains("model") && body["model"].is_string()) check_model(ctx, body["model"]);
  std::vector<int32_t> ids;
  if (body.contains("messages")) {
    // Reuse the chat parser for messages, tools and the template switches.
    // Only the chat fields go on (the chat parser refuses any other by name; /tokenize's own
    // fields are read here).
    Json chat = Json::object();
    for (auto it = body.begin(); it != body.end(); ++it)
      if (it.key() != "stream" && std::find(kChatFields.begin(), kChatFields.end(), it.key()) != kChatFields.end())
        chat[it.key()] = it.value();
    ChatRequest cr = parse_chat_request(chat, ctx.defaults);
    std::shared_ptr<const ImagePrompt> images;  // the image tokens are the <|media_pad|> ids
    ids = render_chat_request_images(ctx, cr, &images, /*encode=*/false);
    if (static_cast<int64_t>(ids.size()) > ctx.max_tokenize_tokens)
      throw too_many_tokens(ctx, "messages", "the rendered chat holds " + std::to_string(ids.size()));
  } else if (body.contains("prompt") || body.contains("content")) {
    // "content" is llama-server's name for the text, "prompt" vLLM's.
    const char* key = body.contains("prompt") ? "prompt" : "content";
    if (!body[key].is_string()) throw bad_request(key, std::string(key) + ": expected a string");
    std::optional<std::vector<int32_t>> got = ctx.tok->encode_at_most(body[key].get_ref<const std::string&>(),
                                                                      static_cast<size_t>(ctx.max_tokenize_tokens));
    if (!got)
      throw too_many_tokens(ctx, "prompt", "the text holds more than " + std::to_string(ctx.max_tokenize_tokens));
    ids = std::move(*got);
  } else {
    throw bad_request("prompt", "expected \"prompt\" or \"content\" (a string) or \"messages\" (a list)");
  }
  // llama-server's switches: add_special (K3 prompts carry no BOS or other added special, so
  // true and false give the same ids) and with_pieces (tokens as [{"id", "piece"}]).
  for (const char* k : {"add_special", "with_pieces", "parse_special"})
    if (body.contains(k) && !body[k].is_boolean())
      throw bad_request(k, std::string(k) + ": expected true or false, found " + body[k].dump());
  if (body.contains("parse_special"))
    throw bad_request("parse_special", "parse_special: not supported (text is encoded with specials disallowed)");
  if (body.value("with_pieces", false)) {
    Json toks = Json::array();
    for (int32_t id : ids) toks.push_back(Json{{"id", id}, {"piece", tok::utf8_sanitize(ctx.tok->token_bytes(id))}});
    send_json(res, Json{{"count", ids.size()}, {"max_model_len", ctx.n_ctx}, {"tokens", toks}, {"token_strs", nullptr}});
    return;
  }
  // The body is written directly (no JSON tree of the ids: 16 bytes per id): the same bytes as
  // {"count", "max_model_len", "tokens", "token_strs": null} dumped by nlohmann::ordered_json.
  std::string out;
  out.reserve(64 + ids.size() * 7);
  out +=
      "{\"count\":" + std::to_string(ids.size()) + ",\"max_model_len\":" + std::to_string(ctx.n_ctx) + ",\"tokens\":[";
  char buf[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    const int n = std::snprintf(buf, sizeof buf, i ? ",%d" : "%d", static_cast<int>(ids[i]));
    out.append(buf, static_cast<size_t>(n));
  }
  out += "],\"token_strs\":null}";
  std::vector<int32_t>().swap(ids);
  res.status = 200;
  res.set_content(std::move(out), "application/json");
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
  const std::string text = tok::utf8_sanitize(ctx.tok->decode(ids));
  send_json(res, Json{{"prompt", text}, {"content", text}});  // vLLM's and llama-server's names
}

}  // namespace k3::server
