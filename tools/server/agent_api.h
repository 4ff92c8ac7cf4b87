// Translators between the agent APIs and the Chat Completions request the chat endpoint runs:
// OpenAI's Responses API (POST /v1/responses) and Anthropic's Messages API (POST /v1/messages).
// The HTTP layer only translates: a Responses or Messages body becomes a Chat Completions body
// (OpenAI shape, docs/serving.md "Agent APIs" has the field table), which parse_chat_request
// turns into the same ChatRequest /v1/chat/completions builds; the generated StreamDeltas become
// Responses output items / Messages content blocks through the stream state machines below
// (a non-streamed answer runs the same machine and keeps only the final object).
// Pure functions and classes: no network, no model.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "openai_request.h"
#include "openai_response.h"
#include "stream_parser.h"

namespace k3::server {

// ---------------------------------------------------------------------------------------------
// OpenAI Responses API

/// A Responses body translated. `chat_body` is a Chat Completions body (messages = the stored
/// history of previous_response_id, then instructions as a system message, then the input
/// items); `echo` holds the request fields a response object repeats (instructions, tools,
/// tool_choice, text, reasoning, temperature, top_p, max_output_tokens, parallel_tool_calls,
/// truncation, metadata, user, store, previous_response_id).
struct ResponsesTranslation {
  Json chat_body;
  Json echo;
  bool store = true;  ///< "store" (default true): keep the response for previous_response_id
  /// chat_body's messages start with the system message of `instructions`: it applies to this
  /// request only (OpenAI: a previous response's instructions are not carried over), so the
  /// history stored for previous_response_id leaves it out.
  bool instructions_first = false;
};

/// The previous_response_id of a Responses body ("" when absent). Errors: ApiError 400
/// (param "previous_response_id") when it is not a string.
std::string responses_previous_id(const Json& body);

/// Translates a Responses body. `history` is the chat messages stored under
/// previous_response_id (an array; empty when none). Accepted fields: model, input (string or
/// items: message items with string or input_text/output_text content, function_call,
/// function_call_output, reasoning), instructions, tools (function tools: {type, name,
/// description, parameters, strict}), tool_choice (auto|none|required|{type: function, name}),
/// text ({format: text|json_object|json_schema{name, schema, strict, description}}), reasoning
/// ({effort: none|minimal|low|medium|high|xhigh, summary}), max_output_tokens, temperature,
/// top_p, top_k, seed, stream, store, previous_response_id, metadata (object of strings), user,
/// parallel_tool_calls (true), truncation ("disabled"), include ([]), service_tier
/// (auto|default), background (false), k3_forced_output (tests, as in chat). Any other field, and unsupported values, get ApiError 400
/// naming the field. Effort table: none -> thinking off; minimal, low -> K3 "low"; medium ->
/// "high"; high, xhigh -> "max".
ResponsesTranslation translate_responses_request(const Json& body, const Json& history);

/// parse_chat_request of a translated body, with the chat field names in 400s turned into the
/// Responses names (messages -> input, max_tokens -> max_output_tokens, response_format ->
/// text.format, reasoning_effort -> reasoning.effort).
ChatRequest parse_translated_responses(const Json& chat_body, const RequestDefaults& d);

/// Responses usage: {input_tokens, input_tokens_details: {cached_tokens: 0}, output_tokens,
/// output_tokens_details: {reasoning_tokens}, total_tokens}.
Json responses_usage(int64_t input_tokens, int64_t output_tokens, int64_t reasoning_tokens);

/// Builds the output items of a response from generated deltas, and the typed stream events
/// (each a JSON object with "type" and "sequence_number", numbered from 0) that announce them:
/// reasoning text -> a "reasoning" item (content [{type: reasoning_text}]), content -> a
/// "message" item (content [{type: output_text}]), each tool call -> a "function_call" item
/// (call_id = the tool call's id). An item is closed (its .done events) when the next kind
/// begins or at finish().
class ResponsesStream {
 public:
  /// `response` is the response object with status "in_progress" and empty output.
  explicit ResponsesStream(Json response);
  /// response.created and response.in_progress.
  std::vector<Json> start();
  /// The events one delta adds.
  std::vector<Json> push(const StreamDelta& d);
  /// Closes the open item and returns its events plus response.completed (status "completed")
  /// or response.incomplete (status "incomplete", incomplete_details.reason = `incomplete_reason`
  /// when that is not empty). `usage` goes into the final response object.
  std::vector<Json> finish(const std::string& incomplete_reason, const Json& usage);
  /// The response object (final after finish()).
  const Json& response() const { return response_; }

 private:
  enum class Kind { None, Reasoning, Message, Call };
  Json event(const char* type, Json fields);
  void close(std::vector<Json>& ev);
  void open(Kind k, std::vector<Json>& ev, const ToolCallDelta* call = nullptr);

  Json response_;
  int64_t seq_ = 0;
  Kind kind_ = Kind::None;
  int call_index_ = -1;
  Json item_;
  std::string text_;
};

/// "event: TYPE\ndata: JSON\n\n" (the SSE framing of the Responses and Messages streams).
std::string sse_event(const Json& ev);

/// The chat messages a stored response continues from: `chat_messages` (the request's, after
/// translation) followed by the response's output as an assistant message (reasoning_content,
/// content, tool_calls).
Json responses_history(const Json& chat_messages, const Json& output_items);

/// Stored responses for previous_response_id: at most `capacity` entries, least recently used
/// evicted first. Thread-safe.
class ResponseStore {
 public:
  explicit ResponseStore(std::size_t capacity) : cap_(capacity) {}
  /// Stores (or replaces) `id`; a capacity of 0 stores nothing.
  void put(const std::string& id, Json history);
  /// The chat history stored under `id`, or nullopt (never stored, or evicted).
  std::optional<Json> get(const std::string& id);
  std::size_t size();
  std::size_t capacity() const { return cap_; }

 private:
  std::mutex mu_;
  std::size_t cap_;
  std::list<std::pair<std::string, Json>> lru_;  // most recent first
  std::unordered_map<std::string, std::list<std::pair<std::string, Json>>::iterator> index_;
};

// ---------------------------------------------------------------------------------------------
// Anthropic Messages API

/// A Messages body translated to a Chat Completions body.
struct MessagesTranslation {
  Json chat_body;
  std::string model;  ///< "model" as sent (echoed in the answer)
};

/// Translates a Messages body. Accepted fields: model (required), messages (required; user /
/// assistant; content a string or blocks: text, tool_use, tool_result {tool_use_id, content,
/// is_error}, thinking, each optionally with cache_control), system (string or text blocks),
/// max_tokens (required unless `count_only`), tools ({name, description, input_schema,
/// cache_control}), tool_choice ({type: auto|any|tool|none, name, disable_parallel_tool_use:
/// false}), thinking ({type: enabled, budget_tokens >= 1024} or {type: disabled}), stop_sequences,
/// temperature [0, 1], top_p, top_k, metadata ({user_id}), stream, service_tier
/// (auto|standard_only), k3_forced_output (tests, as in chat), output_config ({effort:
/// low -> "low", medium, high -> "high", xhigh, max -> "max"}; {format: {type: json_schema,
/// schema}} -> response_format json_schema). thinking {type: adaptive} turns thinking on at
/// the default effort. Without "thinking" K3's thinking is off (Anthropic's default). Budget
/// table: budget_tokens < 4096 -> K3 effort "low", < 16384 -> "high", else "max"; the budget
/// picks the effort, it does not cut the reasoning. Errors: ApiError 400 naming the field.
MessagesTranslation translate_messages_request(const Json& body, bool count_only = false);

/// Anthropic's error body {"type": "error", "error": {"type", "message"}}; the type follows the
/// status (400 invalid_request_error, 401 authentication_error, 403 permission_error, 404
/// not_found_error, 413 request_too_large, 429 rate_limit_error, 503 overloaded_error, else
/// api_error).
Json anthropic_error_body(const ApiError& e);

/// Builds the content blocks of a message from generated deltas, and its stream events (JSON
/// objects with "type"): reasoning -> "thinking" blocks (thinking_delta), content -> "text"
/// blocks (text_delta), tool calls -> "tool_use" blocks (input_json_delta; the final block's
/// input is the arguments parsed, or {"arguments": text} when they are not a JSON object).
class MessagesStream {
 public:
  /// `message` is the message object with empty content, stop_reason null.
  explicit MessagesStream(Json message);
  /// message_start (usage.input_tokens set) and a ping.
  std::vector<Json> start(int64_t input_tokens);
  std::vector<Json> push(const StreamDelta& d);
  /// Closes the open block; message_delta (stop_reason, stop_sequence, usage.output_tokens) and
  /// message_stop. stop_reason: end_turn, max_tokens, stop_sequence or tool_use.
  std::vector<Json> finish(const std::string& stop_reason, const std::string& stop_sequence, int64_t input_tokens,
                           int64_t output_tokens);
  const Json& message() const { return message_; }

 private:
  enum class Kind { None, Thinking, Text, ToolUse };
  void close(std::vector<Json>& ev);
  void open(Kind k, std::vector<Json>& ev, const ToolCallDelta* call = nullptr);

  Json message_;
  Kind kind_ = Kind::None;
  int call_index_ = -1;
  int index_ = -1;
  Json block_;
  std::string text_;
};

}  // namespace k3::server
