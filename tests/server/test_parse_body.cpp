// parse_body on hostile bodies found by fuzz/server_request.cpp: every failure is an ApiError
// 400 naming the body, never an escaping nlohmann exception (which would end the process).
// Deep JSON: the body and the JSON text in a tool call's "arguments" string are bounded at
// kMaxJsonDepth levels, with a 400 naming the field, before anything recursive sees them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "api_error.h"
#include "openai_request.h"
#include "tokenizer/chat_k3.h"

namespace {

int status_of(const std::string& body) {
  try {
    k3::server::parse_body(body);
    return 200;
  } catch (const k3::server::ApiError& e) {
    return e.status();
  }
}

TEST(ParseBody, NumbersBeyondADoubleAreA400) {
  EXPECT_EQ(status_of("55555e5555555555755"), 400);  // the fuzzer's crash input (out_of_range.406)
  EXPECT_EQ(status_of(R"({"max_tokens": 1e999})"), 400);
  EXPECT_EQ(status_of(R"({"temperature": -1e400})"), 400);
  EXPECT_EQ(status_of(R"({"ok": 1})"), 200);
}

std::string nested(int depth) {
  return std::string(static_cast<std::size_t>(depth), '[') + std::string(static_cast<std::size_t>(depth), ']');
}

TEST(ParseBody, DepthUpToTheLimitIsAcceptedOneMoreIsA400) {
  // {"a": [[...]]}: the object is level 1, so n brackets make depth n + 1.
  const int lim = k3::server::kMaxJsonDepth;
  EXPECT_EQ(status_of("{\"a\": " + nested(lim - 1) + "}"), 200);
  EXPECT_EQ(status_of("{\"a\": " + nested(lim) + "}"), 400);
  EXPECT_EQ(status_of("{\"a\": " + nested(50000) + "}"), 400);
  // Brackets inside strings are text, not depth.
  EXPECT_EQ(status_of("{\"a\": \"" + std::string(50000, '[') + "\"}"), 200);
}

// A chat body holding messages[2] = an assistant turn whose one tool call has `arguments`.
std::string chat_with_arguments(const std::string& arguments) {
  nlohmann::ordered_json body = nlohmann::ordered_json::parse(R"({"messages": [
      {"role": "user", "content": "hi"}, {"role": "user", "content": "again"},
      {"role": "assistant", "content": null, "tool_calls": [
          {"id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "ok"}]})");
  body["messages"][2]["tool_calls"][0]["function"]["arguments"] = arguments;
  return body.dump();
}

TEST(ParseBody, F1DeepToolCallArgumentsStringIsA400NamingTheField) {
  // The attack: 50,000-deep JSON inside the arguments *string* passes the body's depth check
  // (it is one string there); a recursive parse and print in the chat renderer would overflow the stack.
  const k3::server::RequestDefaults d;
  for (const std::string& args : {nested(50000), "{\"a\": " + nested(50000) + "}", "{\"a\": " + nested(64) + "}"}) {
    const nlohmann::ordered_json body = k3::server::parse_body(chat_with_arguments(args));
    try {
      (void)k3::server::parse_chat_request(body, d);
      ADD_FAILURE() << "accepted " << args.substr(0, 20);
    } catch (const k3::server::ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), "messages");
      EXPECT_STREQ(e.what(), "messages[2].tool_calls[0].function.arguments: JSON nested deeper than 64 levels");
    }
  }
  // 64 levels in the arguments text are accepted and render (the object is level 1).
  const auto r =
      k3::server::parse_chat_request(k3::server::parse_body(chat_with_arguments("{\"a\": " + nested(63) + "}")), d);
  const auto segs = k3::build_chat_segments(r.messages, r.chat);
  EXPECT_NE(k3::join_chat_segments(segs).find(std::string(63, '[')), std::string::npos);
}

}  // namespace
