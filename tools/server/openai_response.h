// JSON builders for the OpenAI / vLLM response shapes (spec serving.md): chat.completion,
// chat.completion.chunk, text_completion (also its stream chunks), usage, logprobs, errors.
// Pure functions; nothing here touches the network.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api_error.h"
#include "stream_parser.h"
#include "tokenizer/tokenizer.h"

namespace k3::server {

using Json = nlohmann::ordered_json;

/// {"error": {"message", "type", "param" (null when empty), "code": status}}.
Json error_body(const ApiError& e);

/// {"prompt_tokens", "completion_tokens", "total_tokens"[, "completion_tokens_details":
/// {"reasoning_tokens"}]} (details only when reasoning_tokens >= 0).
Json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t reasoning_tokens = -1);

/// One generated id with its log-probability and the most likely alternatives.
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

/// Chat logprobs content entries: [{"token", "logprob", "bytes", "top_logprobs": [...]}].
Json chat_logprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& lps);

/// Completions logprobs: {"tokens", "token_logprobs", "top_logprobs": [{token: lp}], "text_offset"}.
/// `offset0` is the text offset (bytes) of the first token.
Json completion_logprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& lps, int64_t offset0);

/// The message of a non-streamed chat answer: role, content (null when empty and tool calls
/// exist), reasoning_content (null when empty), tool_calls (omitted when none).
Json chat_message(const std::string& reasoning, const std::string& content, const std::vector<ToolCall>& calls);

/// A delta object of a chat chunk: role (when `with_role`), reasoning_content, content,
/// tool_calls ([{index, id, type, function: {name, arguments}}] for first pieces,
/// [{index, function: {arguments}}] after). Empty fields are omitted.
Json chat_delta(const StreamDelta& d, bool with_role);

/// Identity of one response: id ("chatcmpl-…" / "cmpl-…"), created (unix seconds), model.
struct ResponseMeta {
  std::string id;
  int64_t created = 0;
  std::string model;
  /// A fresh meta: id = prefix + 24 random alphanumerics, created = now.
  static ResponseMeta make(const std::string& prefix, const std::string& model);
};

/// A chat.completion object with one choice. `logprobs` null when not requested.
Json chat_completion(const ResponseMeta& m, Json message, const std::string& finish_reason, Json logprobs, Json usage);

/// A chat.completion.chunk with one choice (finish_reason null when empty; logprobs null when
/// not given).
Json chat_chunk(const ResponseMeta& m, Json delta, const std::string& finish_reason, Json logprobs = nullptr);

/// A chunk with "choices": [] and "usage" (stream_options.include_usage).
Json usage_chunk(const ResponseMeta& m, const char* object, Json usage);

/// A text_completion object (stream chunks have the same shape, without usage).
Json text_completion(const ResponseMeta& m, const std::string& text, const std::string& finish_reason, Json logprobs,
                     Json usage);

/// `data: JSON\n\n` (one SSE event).
std::string sse(const Json& j);
/// `data: [DONE]\n\n`.
inline std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace k3::server
