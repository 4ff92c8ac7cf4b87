// The Responses / Messages translators (agent_api.h): request bodies -> the chat completions
// request the chat endpoint runs (including the constraint fields, mapped onto response_format
// and tool_choice), 400s naming unknown fields, and the stream state machines' events.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "agent_api.h"
#include "api_error.h"

namespace {

using k3::server::ApiError;
using Json = nlohmann::ordered_json;

k3::server::RequestDefaults defaults() {
  k3::server::RequestDefaults d;
  d.sampling.seed = 7;
  d.seed_given = true;
  return d;
}

// The param of the ApiError `f` throws ("" when it does not throw).
template <class F>
std::string error_param(F f) {
  try {
    f();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << e.what();
    return e.param();
  }
  return "";
}

Json responses(const std::string& extra) {
  return Json::parse(R"({"model":"k3-mini","input":"hi")" + extra + "}");
}

TEST(ResponsesTranslate, PlainStringInput) {
  auto t = k3::server::translate_responses_request(
      responses(R"(,"instructions":"be brief","max_output_tokens":7,"temperature":0.5)"), Json::array());
  const Json& m = t.chat_body["messages"];
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0], (Json{{"role", "system"}, {"content", "be brief"}}));
  EXPECT_EQ(m[1], (Json{{"role", "user"}, {"content", "hi"}}));
  EXPECT_EQ(t.chat_body["max_tokens"], 7);
  auto cr = k3::server::parse_translated_responses(t.chat_body, defaults());
  EXPECT_EQ(cr.gen.max_tokens, 7);
  EXPECT_FLOAT_EQ(cr.gen.sampling.temp, 0.5f);
  EXPECT_EQ(t.echo["instructions"], "be brief");
  EXPECT_TRUE(t.store);
}

TEST(ResponsesTranslate, ItemsToolsAndRoundTrip) {
  const Json body = Json::parse(R"({
    "input": [
      {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
      {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "think"}]},
      {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
      {"type": "function_call_output", "call_id": "c1", "output": "sunny"}
    ],
    "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
    "tool_choice": "auto"})");
  auto t = k3::server::translate_responses_request(body, Json::array());
  const Json& m = t.chat_body["messages"];
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0]["content"], "weather?");
  EXPECT_EQ(m[1]["role"], "assistant");
  EXPECT_EQ(m[1]["reasoning_content"], "think");
  EXPECT_EQ(m[1]["tool_calls"][0]["id"], "c1");
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(m[2], (Json{{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}}));
  EXPECT_EQ(t.chat_body["tools"][0]["function"]["name"], "get_weather");
  auto cr = k3::server::parse_translated_responses(t.chat_body, defaults());
  EXPECT_TRUE(cr.tools_given);
  EXPECT_TRUE(cr.chat.tool_choice.is_null());  // auto
}

TEST(ResponsesTranslate, ConstraintsMapOntoChatFields) {
  // tool_choice named -> the chat named choice; required -> "required".
  auto named = k3::server::translate_responses_request(
      responses(R"(,"tools":[{"type":"function","name":"f"},{"type":"function","name":"g"}],)"
                R"("tool_choice":{"type":"function","name":"g"})"),
      Json::array());
  EXPECT_EQ(named.chat_body["tool_choice"], (Json{{"type", "function"}, {"function", {{"name", "g"}}}}));
  auto cr = k3::server::parse_translated_responses(named.chat_body, defaults());
  EXPECT_EQ(cr.chat.tool_choice, "required");
  ASSERT_EQ(cr.chat.tools.size(), 1u);
  EXPECT_EQ(cr.chat.tools[0]["function"]["name"], "g");
  auto req = k3::server::translate_responses_request(
      responses(R"(,"tools":[{"type":"function","name":"f"}],"tool_choice":"required")"), Json::array());
  EXPECT_EQ(k3::server::parse_translated_responses(req.chat_body, defaults()).chat.tool_choice, "required");
  auto none = k3::server::translate_responses_request(
      responses(R"(,"tools":[{"type":"function","name":"f"}],"tool_choice":"none")"), Json::array());
  EXPECT_EQ(k3::server::parse_translated_responses(none.chat_body, defaults()).chat.tool_choice, "none");
  // text.format json_schema -> response_format json_schema (the chat parser decides whether it
  // is served; a refusal names text.format).
  auto js = k3::server::translate_responses_request(
      responses(R"(,"text":{"format":{"type":"json_schema","name":"p","schema":{"type":"object"},"strict":true}})"),
      Json::array());
  EXPECT_EQ(js.chat_body["response_format"],
            (Json{{"type", "json_schema"},
                  {"json_schema", {{"name", "p"}, {"schema", {{"type", "object"}}}, {"strict", true}}}}));
  const std::string p = error_param([&] { k3::server::parse_translated_responses(js.chat_body, defaults()); });
  EXPECT_TRUE(p.empty() || p == "text.format") << p;
  auto jo = k3::server::translate_responses_request(responses(R"(,"text":{"format":{"type":"json_object"}})"),
                                                    Json::array());
  EXPECT_EQ(k3::server::parse_translated_responses(jo.chat_body, defaults()).chat.response_format["type"],
            "json_object");
}

TEST(ResponsesTranslate, ReasoningEffortTable) {
  auto effort = [](const std::string& e) {
    auto t = k3::server::translate_responses_request(responses(R"(,"reasoning":{"effort":")" + e + "\"}"),
                                                     Json::array());
    auto cr = k3::server::parse_translated_responses(t.chat_body, defaults());
    return cr.chat.thinking ? cr.chat.thinking_effort.value_or("?") : std::string("off");
  };
  EXPECT_EQ(effort("none"), "off");
  EXPECT_EQ(effort("minimal"), "low");
  EXPECT_EQ(effort("low"), "low");
  EXPECT_EQ(effort("medium"), "high");
  EXPECT_EQ(effort("high"), "high");
  EXPECT_EQ(effort("xhigh"), "max");
  EXPECT_EQ(effort("max"), "max");
  EXPECT_EQ(error_param([] {
              k3::server::translate_responses_request(responses(R"(,"reasoning":{"effort":"huge"})"), Json::array());
            }),
            "reasoning.effort");
}

TEST(ResponsesTranslate, HistoryPrecedesInput) {
  const Json history = Json::parse(R"([{"role":"user","content":"a"},{"role":"assistant","content":"b"}])");
  auto t = k3::server::translate_responses_request(responses(""), history);
  ASSERT_EQ(t.chat_body["messages"].size(), 3u);
  EXPECT_EQ(t.chat_body["messages"][2]["content"], "hi");
  EXPECT_FALSE(t.instructions_first);
}

TEST(ResponsesTranslate, InstructionsComeFirstAndApplyToThisRequestOnly) {
  const Json history = Json::parse(R"([{"role":"user","content":"a"},{"role":"assistant","content":"b"}])");
  auto t = k3::server::translate_responses_request(responses(R"(,"instructions":"be B")"), history);
  ASSERT_EQ(t.chat_body["messages"].size(), 4u);
  EXPECT_EQ(t.chat_body["messages"][0]["role"], "system");
  EXPECT_EQ(t.chat_body["messages"][0]["content"], "be B");
  EXPECT_EQ(t.chat_body["messages"][1]["content"], "a");
  EXPECT_TRUE(t.instructions_first);  // handle_responses stores the history without it
}

TEST(ResponsesTranslate, RefusalsNameTheField) {
  using k3::server::translate_responses_request;
  EXPECT_EQ(error_param([] { translate_responses_request(responses(R"(,"frobnicate":1)"), Json::array()); }),
            "frobnicate");
  EXPECT_EQ(error_param([] { translate_responses_request(Json::parse(R"({"model":"m"})"), Json::array()); }), "input");
  EXPECT_EQ(error_param([] { translate_responses_request(responses(R"(,"tools":[{"type":"web_search"}])"), Json::array()); }),
            "tools");
  EXPECT_EQ(error_param([] { translate_responses_request(responses(R"(,"parallel_tool_calls":false)"), Json::array()); }),
            "parallel_tool_calls");
  EXPECT_EQ(error_param([] { translate_responses_request(responses(R"(,"text":{"format":{"type":"xml"}})"), Json::array()); }),
            "text.format");
  EXPECT_EQ(error_param([] {
              translate_responses_request(Json::parse(R"({"input":[{"type":"input_image","image_url":"x"}]})"),
                                          Json::array());
            }),
            "input");
  EXPECT_EQ(error_param([] {
              auto t = translate_responses_request(responses(R"(,"max_output_tokens":0)"), Json::array());
              k3::server::parse_translated_responses(t.chat_body, defaults());
            }),
            "max_output_tokens");
  EXPECT_EQ(error_param([] { k3::server::responses_previous_id(Json::parse(R"({"previous_response_id":3})")); }),
            "previous_response_id");
}

TEST(ResponsesStream, EventsAndOutputItems) {
  k3::server::ResponsesStream s(Json{{"id", "resp_1"}, {"status", "in_progress"}, {"output", Json::array()}});
  std::vector<Json> all;
  auto add = [&](std::vector<Json> ev) { all.insert(all.end(), ev.begin(), ev.end()); };
  add(s.start());
  k3::server::StreamDelta r;
  r.reasoning = "hmm";
  add(s.push(r));
  k3::server::StreamDelta c;
  c.content = "Hel";
  add(s.push(c));
  c.content = "lo";
  add(s.push(c));
  k3::server::StreamDelta call;
  call.tool_calls.push_back({0, true, "call_x", "f", ""});
  call.tool_calls.push_back({0, false, "", "", "{\"a\": 1"});
  add(s.push(call));
  k3::server::StreamDelta tail;
  tail.tool_calls.push_back({0, false, "", "", "}"});
  add(s.push(tail));
  add(s.finish("", k3::server::responses_usage(5, 9, 2)));
  std::vector<std::string> types;
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i]["sequence_number"], static_cast<int64_t>(i));
    types.push_back(all[i]["type"]);
  }
  const std::vector<std::string> want = {
      "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
      "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done",
      "response.output_item.done", "response.output_item.added", "response.content_part.added",
      "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
      "response.content_part.done", "response.output_item.done", "response.output_item.added",
      "response.function_call_arguments.delta", "response.function_call_arguments.delta",
      "response.function_call_arguments.done", "response.output_item.done", "response.completed"};
  EXPECT_EQ(types, want);
  const Json& out = s.response()["output"];
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0]["type"], "reasoning");
  EXPECT_EQ(out[0]["content"][0]["text"], "hmm");
  EXPECT_EQ(out[1]["content"][0]["text"], "Hello");
  EXPECT_EQ(out[2]["call_id"], "call_x");
  EXPECT_EQ(out[2]["arguments"], "{\"a\": 1}");
  EXPECT_EQ(s.response()["status"], "completed");
  EXPECT_EQ(s.response()["usage"]["output_tokens_details"]["reasoning_tokens"], 2);
  // The stored history continues with the answer as an assistant message.
  const Json h = k3::server::responses_history(Json::array({Json{{"role", "user"}, {"content", "q"}}}), out);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[1]["content"], "Hello");
  EXPECT_EQ(h[1]["reasoning_content"], "hmm");
  EXPECT_EQ(h[1]["tool_calls"][0]["function"]["arguments"], "{\"a\": 1}");
}

TEST(ResponsesStream, IncompleteAtLength) {
  k3::server::ResponsesStream s(Json{{"output", Json::array()}});
  (void)s.start();
  (void)s.finish("max_output_tokens", k3::server::responses_usage(1, 1, 0));
  EXPECT_EQ(s.response()["status"], "incomplete");
  EXPECT_EQ(s.response()["incomplete_details"]["reason"], "max_output_tokens");
}

TEST(ResponseStore, LeastRecentlyUsedEvicted) {
  k3::server::ResponseStore st(2);
  st.put("a", Json::array({1}));
  st.put("b", Json::array({2}));
  ASSERT_TRUE(st.get("a"));  // a is now the most recent
  st.put("c", Json::array({3}));
  EXPECT_TRUE(st.get("a"));
  EXPECT_FALSE(st.get("b"));
  EXPECT_EQ(*st.get("c"), Json::array({3}));
  EXPECT_EQ(st.size(), 2u);
  k3::server::ResponseStore none(0);
  none.put("a", Json::array());
  EXPECT_FALSE(none.get("a"));
}

Json messages(const std::string& extra) {
  return Json::parse(R"({"model":"k3-mini","max_tokens":16,"messages":[{"role":"user","content":"hi"}])" + extra +
                     "}");
}

TEST(MessagesTranslate, SystemBlocksToolsAndResults) {
  const Json body = Json::parse(R"({
    "model": "k3-mini", "max_tokens": 32,
    "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
    "messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "t", "signature": ""},
        {"type": "text", "text": "calling"},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]}
    ],
    "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "auto"}, "stop_sequences": ["END"], "metadata": {"user_id": "u1"}})");
  auto t = k3::server::translate_messages_request(body);
  const Json& m = t.chat_body["messages"];
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0], (Json{{"role", "system"}, {"content", "sys"}}));
  EXPECT_EQ(m[2]["content"], "calling");
  EXPECT_EQ(m[2]["reasoning_content"], "t");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\"}");
  EXPECT_EQ(m[3], (Json{{"role", "tool"}, {"tool_call_id", "toolu_1"}, {"content", "sunny"}}));
  auto cr = k3::server::parse_chat_request(t.chat_body, defaults());
  EXPECT_EQ(cr.gen.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(cr.gen.user, "u1");
  EXPECT_EQ(cr.chat.tools[0]["function"]["parameters"], (Json{{"type", "object"}}));
  EXPECT_FALSE(cr.chat.thinking);  // Anthropic's default: no thinking
}

TEST(MessagesTranslate, ToolChoiceAndThinkingTable) {
  auto choice = [](const std::string& tc) {
    auto t = k3::server::translate_messages_request(
        messages(R"(,"tools":[{"name":"f","input_schema":{}},{"name":"g","input_schema":{}}],"tool_choice":)" + tc));
    return k3::server::parse_chat_request(t.chat_body, defaults()).chat;
  };
  EXPECT_TRUE(choice(R"({"type":"auto"})").tool_choice.is_null());
  EXPECT_EQ(choice(R"({"type":"any"})").tool_choice, "required");
  EXPECT_EQ(choice(R"({"type":"none"})").tool_choice, "none");
  auto named = choice(R"({"type":"tool","name":"g"})");
  EXPECT_EQ(named.tool_choice, "required");
  ASSERT_EQ(named.tools.size(), 1u);
  EXPECT_EQ(named.tools[0]["function"]["name"], "g");
  auto thinking = [](int budget) {
    auto t = k3::server::translate_messages_request(
        Json::parse(R"({"model":"m","max_tokens":100000,"messages":[{"role":"user","content":"x"}],)"
                    R"("thinking":{"type":"enabled","budget_tokens":)" +
                    std::to_string(budget) + "}}"));
    auto c = k3::server::parse_chat_request(t.chat_body, defaults()).chat;
    EXPECT_TRUE(c.thinking);
    return c.thinking_effort.value_or("?");
  };
  EXPECT_EQ(thinking(1024), "low");
  EXPECT_EQ(thinking(8000), "high");
  EXPECT_EQ(thinking(20000), "max");
}

TEST(MessagesTranslate, RefusalsNameTheField) {
  using k3::server::translate_messages_request;
  EXPECT_EQ(error_param([] { translate_messages_request(messages(R"(,"frobnicate":1)")); }), "frobnicate");
  EXPECT_EQ(error_param([] {
              translate_messages_request(Json::parse(R"({"model":"m","messages":[{"role":"user","content":"x"}]})"));
            }),
            "max_tokens");
  EXPECT_EQ(error_param([] { translate_messages_request(messages(R"(,"temperature":1.5)")); }), "temperature");
  EXPECT_EQ(error_param([] { translate_messages_request(messages(R"(,"thinking":{"type":"enabled","budget_tokens":10})")); }),
            "thinking.budget_tokens");
  EXPECT_EQ(error_param([] { translate_messages_request(messages(R"(,"tool_choice":{"type":"maybe"})")); }),
            "tool_choice");
  EXPECT_EQ(error_param([] {
              translate_messages_request(messages(R"(,"tools":[{"type":"web_search_20250305","name":"w"}])"));
            }),
            "tools");
  EXPECT_EQ(error_param([] {
              translate_messages_request(Json::parse(
                  R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]})"));
            }),
            "messages");
  // count_tokens needs no max_tokens.
  EXPECT_NO_THROW(translate_messages_request(
      Json::parse(R"({"model":"m","messages":[{"role":"user","content":"x"}]})"), /*count_only=*/true));
}

TEST(MessagesStream, EventsAndBlocks) {
  k3::server::MessagesStream s(Json{{"id", "msg_1"}, {"content", Json::array()}});
  std::vector<Json> all;
  auto add = [&](std::vector<Json> ev) { all.insert(all.end(), ev.begin(), ev.end()); };
  add(s.start(4));
  k3::server::StreamDelta d;
  d.reasoning = "r";
  d.content = "x";
  add(s.push(d));
  k3::server::StreamDelta call;
  call.tool_calls.push_back({0, true, "call_abc", "f", ""});
  call.tool_calls.push_back({0, false, "", "", "{\"a\": [1, 2]}"});
  add(s.push(call));
  add(s.finish("tool_use", "", 4, 11));
  std::vector<std::string> types;
  for (const auto& e : all) types.push_back(e["type"]);
  const std::vector<std::string> want = {
      "message_start",       "ping",          "content_block_start", "content_block_delta", "content_block_stop",
      "content_block_start", "content_block_delta", "content_block_stop", "content_block_start",
      "content_block_delta", "content_block_stop",  "message_delta",       "message_stop"};
  EXPECT_EQ(types, want);
  EXPECT_EQ(all[3]["delta"]["type"], "thinking_delta");
  EXPECT_EQ(all[6]["delta"]["type"], "text_delta");
  EXPECT_EQ(all[9]["delta"]["type"], "input_json_delta");
  EXPECT_EQ(all[11]["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(all[11]["usage"]["output_tokens"], 11);
  const Json& c = s.message()["content"];
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0]["thinking"], "r");
  EXPECT_EQ(c[1]["text"], "x");
  EXPECT_EQ(c[2]["id"], "toolu_abc");
  EXPECT_EQ(c[2]["input"], (Json{{"a", {1, 2}}}));
}

TEST(MessagesStream, UnparsableArgumentsKeptAsText) {
  k3::server::MessagesStream s(Json{{"content", Json::array()}});
  (void)s.start(1);
  k3::server::StreamDelta call;
  call.tool_calls.push_back({0, true, "call_1", "f", ""});
  call.tool_calls.push_back({0, false, "", "", "{oops"});
  (void)s.push(call);
  (void)s.finish("max_tokens", "", 1, 2);
  EXPECT_EQ(s.message()["content"][0]["input"], (Json{{"arguments", "{oops"}}));
}

TEST(AnthropicError, Shape) {
  EXPECT_EQ(k3::server::anthropic_error_body(ApiError(401, "no key")),
            (Json{{"type", "error"}, {"error", {{"type", "authentication_error"}, {"message", "no key"}}}}));
  EXPECT_EQ(k3::server::anthropic_error_body(ApiError(400, "bad"))["error"]["type"], "invalid_request_error");
  EXPECT_EQ(k3::server::anthropic_error_body(ApiError(500, "x"))["error"]["type"], "api_error");
}

}  // namespace
