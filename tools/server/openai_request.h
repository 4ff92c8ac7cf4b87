// Parsing and validation of OpenAI request bodies (POST /v1/chat/completions, /v1/completions)
// into typed requests. Every error is an ApiError(400) whose message and `param` name the field
// ("temperature: expected a number in [0, 2], found 7"). Unknown fields are ignored, as OpenAI
// clients send extras.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json_depth.h"
#include "runtime/sampler.h"
#include "tokenizer/chat_k3.h"

namespace k3::server {

/// Server-side defaults a request falls back to (from the `k3 serve` flags).
struct RequestDefaults {
  SamplerParams sampling;            ///< --temp, --top-k, ... (seed ignored: see seed_given)
  bool seed_given = false;           ///< --seed was given: requests without "seed" use sampling.seed
  int64_t max_tokens = -1;           ///< -n; -1 = until a stop id or the context is full
  bool allow_forced_output = false;  ///< --test-forced-output: accept "k3_forced_output"
  bool thinking = true;              ///< K3 thinking when a request does not say (--reasoning-budget 0: off)
  bool reasoning_in_content = false;  ///< --reasoning-format none: reasoning text is sent as content
};

/// Fields common to both endpoints.
struct GenerationFields {
  std::string model;  ///< "" when absent
  std::string user;   ///< OpenAI "user" ("" when absent): the prefix-cache partition
                      ///< with --cache-partition user
  bool stream = false;
  bool include_usage = false;         ///< stream_options.include_usage
  bool ignore_eos = false;            ///< "ignore_eos" (vLLM / llama-server extension, for benchmarks):
                                      ///< stop ids do not end the sequence; max_tokens does
  bool speculative = true;            ///< "speculative": false opts out of the server's speculative
                                      ///< decoding (k3 extension; greedy output is the same either way)
  std::optional<int64_t> max_tokens;  ///< max_tokens / max_completion_tokens, >= 1
  SamplerParams sampling;             ///< defaults overridden by the request; seed resolved
  std::vector<std::string> stop;      ///< text stop strings (non-empty strings)
  int top_logprobs = -1;              ///< -1: no logprobs; 0..20 alternatives per token
  /// "k3_forced_output" (only with RequestDefaults::allow_forced_output): text with K3 markers
  /// (encoded with specials allowed) or a list of ids; emitted instead of sampling.
  std::optional<nlohmann::ordered_json> forced_output;
};

/// A parsed POST /v1/chat/completions body.
struct ChatRequest {
  GenerationFields gen;
  nlohmann::ordered_json messages;  ///< validated OpenAI messages (roles system/user/assistant/tool)
  ChatOptions chat;                 ///< thinking, effort, tools, tool_choice for render_chat
  bool tools_given = false;
};

/// A parsed POST /v1/completions body.
struct CompletionRequest {
  GenerationFields gen;
  std::optional<std::string> prompt_text;  ///< "prompt": string
  std::vector<int32_t> prompt_ids;         ///< "prompt": list of ids (when prompt_text is empty)
  bool echo = false;
};

/// Parses a chat completions body (already JSON-decoded). Validates: messages (non-empty list of
/// objects with a known role: system, developer (rendered as system), user, assistant, tool;
/// content string/null/text parts), tools (list of {"type":"function","function":{"name",...}}),
/// tool_choice (auto|none|required|{"type":"function","function":{"name"}} naming a declared
/// tool; a named choice renders as "required" with only that tool declared), reasoning_effort
/// (low|high|max), chat_template_kwargs.thinking / enable_thinking (bool), response_format
/// ({"type": "json_object"|"text"}; json_schema is refused), n (must be 1), an assistant's
/// tool_calls[k].function.arguments string (JSON text nested at most kMaxJsonDepth levels), and
/// the GenerationFields. chat.thinking starts as RequestDefaults::thinking (--reasoning-budget).
/// Errors: ApiError(400) naming the field.
ChatRequest parse_chat_request(const nlohmann::ordered_json& body, const RequestDefaults& defaults);

/// Parses a completions body: prompt (string, list of one string, or list of ids; ids are
/// range-checked later against the tokenizer), echo, logprobs (int 0..20), and the
/// GenerationFields. Errors: ApiError(400) naming the field.
CompletionRequest parse_completion_request(const nlohmann::ordered_json& body, const RequestDefaults& defaults);

/// Deepest nesting of arrays/objects parse_body accepts, in the body and in JSON text held in a
/// tool call's "arguments" string (k3::kMaxJsonDepth, core/json_depth.h).
constexpr int kMaxJsonDepth = k3::kMaxJsonDepth;

/// Decodes a request body. Errors: ApiError(400) "JSON decode error: ..." (param "body") for
/// malformed JSON, a top-level value that is not an object, or nesting deeper than
/// kMaxJsonDepth.
nlohmann::ordered_json parse_body(const std::string& body);

}  // namespace k3::server
