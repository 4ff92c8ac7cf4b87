// Request parsing and validation: defaults, overrides, and one 400 per malformed field (the
// message and param name the field).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "api_error.h"
#include "openai_request.h"
#include "openai_response.h"

namespace {

using OJ = nlohmann::ordered_json;
using k3::server::ApiError;

k3::server::RequestDefaults defaults() {
  k3::server::RequestDefaults d;
  d.sampling.seed = 7;
  d.seed_given = true;
  return d;
}

OJ chat(const std::string& extra) {
  return OJ::parse(R"({"model":"k3-mini","messages":[{"role":"user","content":"hi"}])" + extra + "}");
}

TEST(OpenAIRequest, ChatDefaultsAndOverrides) {
  auto r = k3::server::parse_chat_request(chat(""), defaults());
  EXPECT_EQ(r.gen.model, "k3-mini");
  EXPECT_FALSE(r.gen.stream);
  EXPECT_EQ(r.gen.sampling.seed, 7u);
  EXPECT_EQ(r.gen.top_logprobs, -1);
  EXPECT_TRUE(r.chat.thinking);
  EXPECT_EQ(r.chat.thinking_effort.value_or(""), "max");

  r = k3::server::parse_chat_request(
      chat(R"(,"stream":true,"stream_options":{"include_usage":true},"max_tokens":5,"max_completion_tokens":9,
             "temperature":0,"top_p":0.5,"top_k":-1,"min_p":0.1,"seed":3,"stop":"x","frequency_penalty":0.5,
             "logprobs":true,"top_logprobs":2,"reasoning_effort":"low","chat_template_kwargs":{"thinking":false})"),
      defaults());
  EXPECT_TRUE(r.gen.stream && r.gen.include_usage);
  EXPECT_EQ(*r.gen.max_tokens, 9);
  EXPECT_EQ(r.gen.sampling.temp, 0.0f);
  EXPECT_EQ(r.gen.sampling.top_p, 0.5f);
  EXPECT_EQ(r.gen.sampling.top_k, 0);
  EXPECT_EQ(r.gen.sampling.seed, 3u);
  EXPECT_EQ(r.gen.sampling.frequency_penalty, 0.5f);
  EXPECT_EQ(r.gen.sampling.repeat_last_n, -1);  // OpenAI penalties cover the whole history
  EXPECT_EQ(r.gen.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.gen.top_logprobs, 2);
  EXPECT_EQ(*r.chat.thinking_effort, "low");
  EXPECT_FALSE(r.chat.thinking);
}

TEST(OpenAIRequest, NamedToolChoiceDeclaresOnlyThatToolAndRequiresACall) {
  const auto r = k3::server::parse_chat_request(
      chat(R"(,"tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b"}}],
             "tool_choice":{"type":"function","function":{"name":"b"}})"),
      defaults());
  ASSERT_EQ(r.chat.tools.size(), 1u);
  EXPECT_EQ(r.chat.tools[0]["function"]["name"], "b");
  EXPECT_EQ(r.chat.tool_choice, "required");
}

void expect_400(const OJ& body, const std::string& param, const std::string& in_message, bool completion = false) {
  try {
    if (completion) k3::server::parse_completion_request(body, defaults());
    else k3::server::parse_chat_request(body, defaults());
    ADD_FAILURE() << "no error for " << body.dump();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << body.dump();
    EXPECT_EQ(e.param(), param) << e.what();
    EXPECT_NE(std::string(e.what()).find(in_message), std::string::npos) << e.what();
    EXPECT_EQ(e.type(), "BadRequestError");
  }
}

TEST(OpenAIRequest, ResponseFormatReachesTheRenderer) {
  auto r = k3::server::parse_chat_request(chat(""), defaults());
  EXPECT_TRUE(r.chat.response_format.is_null());
  r = k3::server::parse_chat_request(chat(R"(,"response_format":{"type":"json_object"})"), defaults());
  EXPECT_EQ(r.chat.response_format, OJ::parse(R"({"type":"json_object"})"));
  r = k3::server::parse_chat_request(chat(R"(,"response_format":{"type":"text"})"), defaults());
  EXPECT_EQ(r.chat.response_format, OJ::parse(R"({"type":"text"})"));
  r = k3::server::parse_chat_request(chat(R"(,"response_format":null)"), defaults());
  EXPECT_TRUE(r.chat.response_format.is_null());
  expect_400(chat(R"(,"response_format":"json")"), "response_format", "response_format: expected");
  expect_400(chat(R"(,"response_format":{"type":1})"), "response_format", "response_format: expected");
  expect_400(chat(R"(,"response_format":{})"), "response_format", "response_format: expected");
  expect_400(chat(R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x"}})"), "response_format",
             "response_format.json_schema.schema: expected a JSON Schema object");
  expect_400(chat(R"(,"response_format":{"type":"xml"})"), "response_format", "\"xml\" is not supported");
}

TEST(OpenAIRequest, EveryMalformedFieldIsA400NamingIt) {
  expect_400(OJ::parse("{}"), "messages", "messages: required");
  expect_400(OJ::parse(R"({"messages":[]})"), "messages", "non-empty");
  expect_400(OJ::parse(R"({"messages":"hi"})"), "messages", "non-empty list");
  expect_400(OJ::parse(R"({"messages":[{"role":"wizard","content":"x"}]})"), "messages", "unknown role \"wizard\"");
  expect_400(OJ::parse(R"({"messages":[{"content":"x"}]})"), "messages", "messages[0].role");
  expect_400(OJ::parse(R"({"messages":[{"role":"user","content":5}]})"), "messages", "messages[0].content");
  expect_400(OJ::parse(R"({"messages":[{"role":"user"}]})"), "messages", "required for a user message");
  expect_400(chat(R"(,"max_tokens":0)"), "max_tokens", "max_tokens: expected an integer >= 1");
  expect_400(chat(R"(,"max_tokens":"5")"), "max_tokens", "max_tokens");
  expect_400(chat(R"(,"max_completion_tokens":-3)"), "max_completion_tokens", "max_completion_tokens");
  expect_400(chat(R"(,"temperature":7)"), "temperature", "temperature: expected a number in [0, 2], found 7");
  expect_400(chat(R"(,"temperature":"hot")"), "temperature", "temperature");
  expect_400(chat(R"(,"top_p":0)"), "top_p", "top_p");
  expect_400(chat(R"(,"top_p":1.5)"), "top_p", "top_p");
  expect_400(chat(R"(,"top_k":-2)"), "top_k", "top_k");
  expect_400(chat(R"(,"top_k":1.5)"), "top_k", "top_k");
  expect_400(chat(R"(,"min_p":2)"), "min_p", "min_p");
  expect_400(chat(R"(,"frequency_penalty":3)"), "frequency_penalty", "frequency_penalty");
  expect_400(chat(R"(,"presence_penalty":-2.5)"), "presence_penalty", "presence_penalty");
  expect_400(chat(R"(,"repetition_penalty":0)"), "repetition_penalty", "repetition_penalty");
  expect_400(chat(R"(,"seed":"x")"), "seed", "seed");
  expect_400(chat(R"(,"n":17)"), "n", "n: expected an integer in [1, 16]");
  EXPECT_EQ(k3::server::parse_chat_request(chat(R"(,"n":3)"), defaults()).gen.n, 3);
  expect_400(chat(R"(,"stream":"yes")"), "stream", "stream: expected true or false");
  expect_400(chat(R"(,"stop":[1])"), "stop", "stop[0]");
  expect_400(chat(R"(,"stop":5)"), "stop", "stop");
  expect_400(chat(R"(,"stop":["}"],"response_format":{"type":"json_object"})"), "stop",
             "stop: cannot be combined with response_format");
  expect_400(chat(R"(,"top_logprobs":3)"), "top_logprobs", "requires \"logprobs\": true");
  expect_400(chat(R"(,"logprobs":true,"top_logprobs":21)"), "top_logprobs", "top_logprobs");
  expect_400(chat(R"(,"reasoning_effort":"extreme")"), "reasoning_effort", "\"medium\", \"high\", \"xhigh\" or \"max\"");
  expect_400(chat(R"(,"chat_template_kwargs":{"thinking":"no"})"), "chat_template_kwargs", "thinking");
  expect_400(chat(R"(,"tools":{"a":1})"), "tools", "tools: expected a list");
  expect_400(chat(R"(,"tools":[{"type":"function","function":{}}])"), "tools", "tools[0].function.name");
  expect_400(chat(R"(,"tool_choice":"sometimes")"), "tool_choice", "tool_choice");
  expect_400(chat(R"(,"tool_choice":{"type":5})"), "tool_choice", "tool_choice");
  expect_400(chat(R"(,"tool_choice":"required")"), "tool_choice", "needs a non-empty \"tools\"");
  expect_400(
      chat(
          R"(,"tools":[{"type":"function","function":{"name":"a"}}],"tool_choice":{"type":"function","function":{"name":"zz"}})"),
      "tool_choice", "\"zz\" is not among the declared tools");
  expect_400(chat(R"(,"k3_forced_output":"x")"), "k3_forced_output", "--test-forced-output");
  // completions
  expect_400(OJ::parse(R"({"max_tokens":3})"), "prompt", "prompt: required", true);
  expect_400(OJ::parse(R"({"prompt":""})"), "prompt", "empty", true);
  expect_400(OJ::parse(R"({"prompt":["a",""]})"), "prompt", "prompt[1]: is empty", true);
  expect_400(OJ::parse(R"({"prompt":["a",[1,-1]]})"), "prompt", "prompt[1][1]", true);
  expect_400(OJ::parse(R"({"prompt":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})"), "prompt",
             "at most 16 prompts", true);
  EXPECT_EQ(k3::server::parse_completion_request(OJ::parse(R"({"prompt":["a",[5,6]]})"), defaults()).prompts.size(), 2u);
  expect_400(OJ::parse(R"({"prompt":[1,-2]})"), "prompt", "prompt[1]", true);
  expect_400(OJ::parse(R"({"prompt":{"x":1}})"), "prompt", "prompt", true);
  expect_400(OJ::parse(R"({"prompt":"a","logprobs":true})"), "logprobs", "logprobs", true);
  expect_400(OJ::parse(R"({"prompt":"a","echo":1})"), "echo", "echo", true);
}

TEST(OpenAIRequest, CompletionPromptForms) {
  auto r =
      k3::server::parse_completion_request(OJ::parse(R"({"prompt":"And God","logprobs":2,"echo":true})"), defaults());
  EXPECT_EQ(*r.prompt_text, "And God");
  EXPECT_EQ(r.gen.top_logprobs, 2);
  EXPECT_TRUE(r.echo);
  r = k3::server::parse_completion_request(OJ::parse(R"({"prompt":[1,2,3]})"), defaults());
  EXPECT_FALSE(r.prompt_text);
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  r = k3::server::parse_completion_request(OJ::parse(R"({"prompt":["one"]})"), defaults());
  EXPECT_EQ(*r.prompt_text, "one");
}

TEST(OpenAIRequest, BodyMustBeAJsonObject) {
  const std::string deep = "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  for (const std::string& bad :
       {std::string("{"), std::string("[1]"), std::string(), std::string("nul"), std::string("{\"a\":}"), deep}) {
    try {
      k3::server::parse_body(bad);
      ADD_FAILURE() << bad.substr(0, 20);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), "body");
      EXPECT_NE(std::string(e.what()).find("JSON decode error"), std::string::npos);
    }
  }
}

TEST(OpenAIResponse, ErrorBodyShape) {
  const OJ j = k3::server::error_body(ApiError(404, "The model `x` does not exist.", "model"));
  EXPECT_EQ(
      j.dump(),
      R"({"error":{"message":"The model `x` does not exist.","type":"NotFoundError","param":"model","code":404}})");
  EXPECT_TRUE(k3::server::error_body(ApiError(429, "busy"))["error"]["param"].is_null());
  EXPECT_EQ(k3::server::error_body(ApiError(429, "busy"))["error"]["type"], "RateLimitError");
}

TEST(OpenAIResponse, UsageAndDeltas) {
  EXPECT_EQ(
      k3::server::usage_json(3, 4, 2).dump(),
      R"({"prompt_tokens":3,"completion_tokens":4,"total_tokens":7,"completion_tokens_details":{"reasoning_tokens":2}})");
  k3::server::StreamDelta d;
  EXPECT_EQ(k3::server::chat_delta(d, true).dump(), R"({"role":"assistant","content":""})");
  d.tool_calls.push_back({0, true, "call_1", "f", ""});
  d.tool_calls.push_back({0, false, "", "", "{}"});
  EXPECT_EQ(
      k3::server::chat_delta(d, false).dump(),
      R"({"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}},{"index":0,"function":{"arguments":"{}"}}]})");
}

}  // namespace
