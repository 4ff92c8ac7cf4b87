// Parsing and validation of OpenAI request bodies (POST /v1/chat/completions, /v1/completions)
// into typed requests. Every error is an ApiError(400) whose message and `param` name the field
// ("temperature: expected a number in [0, 2], found 7"). No field is silently ignored: a field
// outside the endpoint's list (kChatFields / kCompletionFields, docs/api.md) is a 400 naming it.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json_depth.h"
#include "runtime/grammar_constraint.h"
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
  int64_t n = 1;                      ///< choices (chat: 1..16, sampled together; completions: 1)
  SamplerParams sampling;             ///< defaults overridden by the request; seed resolved
  std::vector<std::string> stop;      ///< text stop strings (non-empty strings)
  int top_logprobs = -1;              ///< -1: no logprobs; 0..20 alternatives per token
  /// "k3_forced_output" (only with RequestDefaults::allow_forced_output): text with K3 markers
  /// (encoded with specials allowed) or a list of ids; emitted instead of sampling.
  std::optional<nlohmann::ordered_json> forced_output;
  /// Structured output: from response_format (json_object / json_schema), "grammar" (GBNF) or
  /// tool_choice "required" / a named function (one call, arguments of the tool's schema);
  /// compiled by make_seq_request (a compile error is a 400 naming constraint_param).
  ConstraintSpec constraint;
  std::string constraint_param;  ///< "response_format", "grammar" or "tool_choice"
};

/// A parsed POST /v1/chat/completions body.
struct ChatRequest {
  GenerationFields gen;
  nlohmann::ordered_json messages;  ///< validated OpenAI messages (roles system/user/assistant/tool)
  ChatOptions chat;                 ///< thinking, effort, tools, tool_choice for render_chat
  bool tools_given = false;
};

/// One prompt of a completions request: text, or ids (when text is empty).
struct CompletionPrompt {
  std::optional<std::string> text;
  std::vector<int32_t> ids;
};

/// A parsed POST /v1/completions body.
struct CompletionRequest {
  GenerationFields gen;
  std::optional<std::string> prompt_text;  ///< "prompt": string (the first prompt)
  std::vector<int32_t> prompt_ids;         ///< "prompt": list of ids (when prompt_text is empty)
  std::vector<CompletionPrompt> prompts;   ///< every prompt (1..16), one choice each
  bool echo = false;
};

/// The top-level fields each endpoint takes (docs/api.md says what k3 does with each); any other
/// field is refused with a 400 naming it.
extern const std::vector<std::string> kChatFields;
extern const std::vector<std::string> kCompletionFields;

/// OpenAI reasoning_effort -> K3 thinking effort: "minimal" and "low" -> low, "medium" and
/// "high" -> high, "max" -> max (K3's own values pass through), "none" -> thinking off
/// (std::nullopt). Errors: ApiError(400) naming `param` for any other value.
std::optional<std::string> map_reasoning_effort(const nlohmann::ordered_json& v, const std::string& param);

/// Parses a chat completions body (already JSON-decoded). Validates: messages (non-empty list of
/// objects with a known role: system, developer (rendered as system), user, assistant, tool;
/// content string/null/text parts), tools (list of {"type":"function","function":{"name",...}}),
/// tool_choice (auto|none|required|{"type":"function","function":{"name"}} naming a declared
/// tool; a named choice renders as "required" with only that tool declared), reasoning_effort
/// (map_reasoning_effort), chat_template_kwargs.thinking / enable_thinking (bool), response_format
/// ({"type": "text"|"json_object"} or {"type": "json_schema", "json_schema": {"name", "schema",
/// "strict"}}: a grammar constraint of the response channel), grammar (GBNF), logit_bias, n
/// (1..16), an assistant's
/// tool_calls[k].function.arguments string (JSON text nested at most kMaxJsonDepth levels), and
/// the GenerationFields. chat.thinking starts as RequestDefaults::thinking (--reasoning-budget).
/// Errors: ApiError(400) naming the field.
ChatRequest parse_chat_request(const nlohmann::ordered_json& body, const RequestDefaults& defaults);

/// Parses a completions body: prompt (string, list of ids, or a list of 1..16 strings or id
/// lists: one choice each; ids are range-checked later against the tokenizer), echo, logprobs (int 0..20), and the
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
