// K3StreamParser against parse_k3_output (the non-incremental oracle) on assistant turns built
// from the K3 chat vectors, UTF-8 characters split across ids, tool-call argument streaming, and
// truncated output; PlainTextDecoder; StopMatcher.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <map>

#include "../tokenizer/tokenizer_test_util.h"
#include "core/error.h"
#include "stop_matcher.h"
#include "stream_parser.h"
#include "tokenizer/chat_k3.h"
#include "tokenizer/chat_output.h"
#include "tokenizer/utf8.h"

namespace {

using OJ = nlohmann::ordered_json;
using k3::server::K3StreamParser;
using k3::server::StreamDelta;

// Ids of an assistant turn as the model would generate them after the default prompt.
std::vector<int32_t> generated_ids(const k3::Tokenizer& t, const OJ& assistant, bool thinking = true) {
  k3::ChatOptions o;
  o.thinking = thinking;
  o.thinking_effort.reset();
  o.add_generation_prompt = false;
  std::vector<int32_t> ids = k3::render_chat(t, OJ::array({assistant}), o);
  k3::ChatOptions g;
  g.thinking = thinking;
  g.thinking_effort.reset();
  const std::vector<int32_t> head = k3::render_chat(t, OJ::array(), g);
  EXPECT_TRUE(std::equal(head.begin(), head.end(), ids.begin()));
  return {ids.begin() + static_cast<std::ptrdiff_t>(head.size()), ids.end()};
}

struct Streamed {
  std::vector<StreamDelta> deltas;
  StreamDelta all;
  std::vector<k3::server::ToolCall> calls;
};

Streamed stream(const k3::Tokenizer& t, const std::vector<int32_t>& ids, bool thinking = true) {
  K3StreamParser p(t, thinking);
  Streamed s;
  for (int32_t id : ids) s.deltas.push_back(p.push(id));
  s.deltas.push_back(p.finish());
  for (const auto& d : s.deltas) s.all.append(d);
  s.calls = p.tool_calls();
  return s;
}

void expect_matches_oracle(const k3::Tokenizer& t, const std::vector<int32_t>& ids, bool thinking = true) {
  const k3::ParsedOutput want = k3::parse_k3_output(t, ids, thinking);
  const Streamed got = stream(t, ids, thinking);
  EXPECT_EQ(got.all.reasoning, want.reasoning);
  EXPECT_EQ(got.all.content, want.content);
  ASSERT_EQ(got.calls.size(), want.tool_calls.size());
  for (std::size_t i = 0; i < want.tool_calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].name, want.tool_calls[i].name);
    if (want.tool_calls[i].raw_arguments.empty())
      EXPECT_EQ(OJ::parse(got.calls[i].arguments), want.tool_calls[i].arguments) << got.calls[i].arguments;
    else EXPECT_EQ(got.calls[i].arguments, want.tool_calls[i].raw_arguments);
    EXPECT_EQ(got.calls[i].id.rfind("call_", 0), 0u);
    EXPECT_EQ(got.calls[i].id.size(), 29u);
  }
  for (const auto& d : got.deltas) {
    EXPECT_TRUE(k3::tok::utf8_valid(d.reasoning));
    EXPECT_TRUE(k3::tok::utf8_valid(d.content));
  }
}

TEST(StreamParser, MatchesParseK3OutputOnTurnsBuiltFromTheChatVectors) {
  const auto& t = k3test::kimi();
  const OJ j = OJ::parse(k3test::read(k3test::data_dir() + "/k3_chat_vectors.json"));
  int n = 0;
  for (const auto& v : j["vectors"]) {
    for (const auto& m : v["messages"]) {
      if (!m.contains("content") || !m["content"].is_string()) continue;
      const std::string text = m["content"];
      OJ a = {{"role", "assistant"}, {"content", text}, {"reasoning_content", "thinking about " + text}};
      SCOPED_TRACE(v["name"].get<std::string>());
      expect_matches_oracle(t, generated_ids(t, a));
      expect_matches_oracle(t, generated_ids(t, a, /*thinking=*/false), false);
      OJ args = OJ::object();
      args["text"] = text;
      args["n"] = 2;
      args["deep"] = OJ::parse(R"({"a": [1, "b"]})");
      OJ fn1 = OJ::object();
      fn1["name"] = "echo";
      fn1["arguments"] = args;
      OJ fn2 = OJ::object();
      fn2["name"] = "raw";
      fn2["arguments"] = "not json {";
      OJ c1 = OJ::object(), c2 = OJ::object();
      c1["id"] = "x";
      c1["type"] = "function";
      c1["function"] = fn1;
      c2["function"] = fn2;
      a["tool_calls"] = OJ::array({c1, c2});
      expect_matches_oracle(t, generated_ids(t, a));
      ++n;
    }
  }
  EXPECT_GE(n, 8);
}

TEST(StreamParser, ToolCallArgumentsStreamAsPythonJsonFragments) {
  const auto& t = k3test::kimi();
  const OJ a = OJ::parse(R"({"role":"assistant","content":"Checking.","reasoning_content":"weather?",
      "tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\", \"days\": 3}"}},
                    {"id":"c2","type":"function","function":{"name":"noargs","arguments":"{}"}}]})");
  const Streamed s = stream(t, generated_ids(t, a));
  EXPECT_EQ(s.all.reasoning, "weather?");
  EXPECT_EQ(s.all.content, "Checking.");
  ASSERT_EQ(s.calls.size(), 2u);
  EXPECT_EQ(s.calls[0].arguments, R"({"city": "Paris", "days": 3})");  // vLLM's kimi_k3 formatting
  EXPECT_EQ(s.calls[1].arguments, "{}");
  // Pieces: header (first, id + name, no arguments), then one fragment per argument, then "}".
  std::vector<k3::server::ToolCallDelta> pieces;
  for (const auto& d : s.deltas) pieces.insert(pieces.end(), d.tool_calls.begin(), d.tool_calls.end());
  ASSERT_EQ(pieces.size(), 6u);
  EXPECT_TRUE(pieces[0].first);
  EXPECT_EQ(pieces[0].name, "get_weather");
  EXPECT_EQ(pieces[0].index, 0);
  EXPECT_EQ(pieces[1].arguments, R"({"city": "Paris")");
  EXPECT_EQ(pieces[2].arguments, R"(, "days": 3)");
  EXPECT_EQ(pieces[3].arguments, "}");
  EXPECT_TRUE(pieces[4].first);
  EXPECT_EQ(pieces[4].index, 1);
  EXPECT_EQ(pieces[5].arguments, "{}");
  EXPECT_NE(s.calls[0].id, s.calls[1].id);
}

// byte -> the id whose token is exactly that byte.
std::map<unsigned char, int32_t> byte_ids(const k3::Tokenizer& t) {
  std::map<unsigned char, int32_t> m;
  for (int32_t id = 0; id < t.n_ranks() && m.size() < 256; ++id) {
    const std::string_view b = t.token_bytes(id);
    if (b.size() == 1) m.emplace(static_cast<unsigned char>(b[0]), id);
  }
  return m;
}

TEST(StreamParser, NeverSplitsAUtf8CharacterAcrossDeltas) {
  const auto& t = k3test::kimi();
  const auto bid = byte_ids(t);
  const std::string text = "é中🌞x𝔘";
  for (bool thinking : {true, false}) {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(bid.at(c));
    K3StreamParser p(t, thinking);
    std::string all;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const StreamDelta d = p.push(ids[i]);
      const std::string& s = thinking ? d.reasoning : d.content;
      EXPECT_TRUE(k3::tok::utf8_valid(s)) << i;
      EXPECT_EQ(s.find("\xEF\xBF\xBD"), std::string::npos) << "U+FFFD for a character still arriving, byte " << i;
      all += s;
    }
    const StreamDelta f = p.finish();
    all += thinking ? f.reasoning : f.content;
    EXPECT_EQ(all, text);
  }
  // Truncated mid-character: the held bytes become U+FFFD only at finish().
  K3StreamParser p(t, false);
  std::string all;
  for (unsigned char c : std::string("a🌞").substr(0, 3)) all += p.push(bid.at(c)).content;
  EXPECT_EQ(all, "a");
  EXPECT_EQ(p.finish().content, "\xEF\xBF\xBD");
}

TEST(StreamParser, ResponseWithoutThinkCloseEndsReasoningAndStopIdsEndTheOutput) {
  const auto& t = k3test::kimi();
  std::vector<int32_t> ids = t.encode("r");
  for (int32_t id : t.encode("<|open|>response<|sep|>ans[EOS]more", k3::AllowedSpecials::all())) ids.push_back(id);
  const Streamed s = stream(t, ids);
  EXPECT_EQ(s.all.reasoning, "r");
  EXPECT_EQ(s.all.content, "ans");
  expect_matches_oracle(t, ids);
  // A marker spelled as text stays text.
  expect_matches_oracle(t, t.encode("a<|close|>think<|sep|>b"));
}

TEST(StreamParser, TruncatedInsideAnArgumentKeepsValidJson) {
  const auto& t = k3test::kimi();
  std::vector<int32_t> ids = t.encode(
      "<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|><|open|>argument key=\"q\" "
      "type=\"string\"<|sep|>half an ans",
      k3::AllowedSpecials::all());
  const Streamed s = stream(t, ids);
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(OJ::parse(s.calls[0].arguments), OJ({{"q", "half an ans"}}));
  expect_matches_oracle(t, ids);
}

TEST(StreamParser, PythonJsonDumps) {
  EXPECT_EQ(k3::server::py_json_dumps(OJ::parse(R"({"a":[1,{"b":null}],"c":"é"})")),
            R"({"a": [1, {"b": null}], "c": "é"})");
}

std::string nested(int depth) {
  return std::string(static_cast<std::size_t>(depth), '[') + std::string(static_cast<std::size_t>(depth), ']');
}

TEST(StreamParser, F7DeepToolCallArgumentInModelOutputIsPassedOnAsAStringNotACrash) {
  // The model's output is the attacker here: a 50,000-deep argument value parsed and re-printed
  // recursively (py_json_dumps) would overflow the stack.
  const auto& t = k3test::kimi();
  auto out = [&](const std::string& body) {
    return t.encode("<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|>" + body +
                        "<|close|>call<|sep|><|close|>tools<|sep|><|end_of_msg|>",
                    k3::AllowedSpecials::all());
  };
  const std::string deep = nested(50000);
  std::vector<int32_t> ids =
      out("<|open|>argument key=\"v\" type=\"object\"<|sep|>" + deep + "<|close|>argument<|sep|>");
  Streamed s = stream(t, ids);
  ASSERT_EQ(s.calls.size(), 1u);
  // Valid, shallow JSON: the deep text travels as a JSON string (as text that does not parse).
  EXPECT_EQ(s.calls[0].arguments, "{\"v\": \"" + deep + "\"}");
  EXPECT_EQ(OJ::parse(s.calls[0].arguments)["v"], deep);
  expect_matches_oracle(t, ids);
  // At the limit the value is parsed and printed as JSON.
  ids = out("<|open|>argument key=\"v\" type=\"array\"<|sep|>" + nested(64) + "<|close|>argument<|sep|>");
  s = stream(t, ids);
  EXPECT_EQ(s.calls[0].arguments, "{\"v\": " + nested(64) + "}");
  expect_matches_oracle(t, ids);
  // Truncated inside the deep argument: the same.
  ids = t.encode(
      "<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|>"
      "<|open|>argument key=\"v\" type=\"object\"<|sep|>" +
          std::string(50000, '['),
      k3::AllowedSpecials::all());
  s = stream(t, ids);
  EXPECT_EQ(s.calls[0].arguments, "{\"v\": \"" + std::string(50000, '[') + "\"}");
  // A raw json block is the arguments text verbatim, however deep (never parsed).
  ids = out("<|open|>json type=\"object\"<|sep|>{\"a\": " + deep + "}<|close|>json<|sep|>");
  s = stream(t, ids);
  EXPECT_EQ(s.calls[0].arguments, "{\"a\": " + deep + "}");
}

TEST(StreamParser, PythonJsonDumpsRefusesValuesDeeperThanTheLimit) {
  EXPECT_EQ(k3::server::py_json_dumps(OJ::parse(nested(64))), nested(64));
  EXPECT_THROW(k3::server::py_json_dumps(OJ::parse(nested(65))), k3::Error);
  EXPECT_THROW(k3::server::py_json_dumps(OJ::parse(nested(50000))), k3::Error);
}

TEST(PlainTextDecoder, DropsSpecialsAndHoldsIncompleteCharacters) {
  const auto& t = k3test::kimi();
  const auto bid = byte_ids(t);
  k3::server::PlainTextDecoder d(t);
  std::string all;
  const std::string s = "🌞";
  for (unsigned char c : s) {
    const std::string piece = d.push(bid.at(c)).content;
    EXPECT_TRUE(piece.empty() || piece == s);
    all += piece;
  }
  all += d.push(t.bos_id()).content;
  all += d.finish().content;
  EXPECT_EQ(all, s);
}

TEST(StopMatcher, CutsAtTheEarliestStopAndHoldsPossiblePrefixes) {
  k3::server::StopMatcher m({"END", "\n\n", ""});
  EXPECT_EQ(m.push("Hello E"), "Hello ");
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("x"), "ENx");
  EXPECT_EQ(m.push("a\n"), "a");
  EXPECT_EQ(m.push("\nrest"), "");
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.flush(), "");

  k3::server::StopMatcher u({"é!"});
  EXPECT_EQ(u.push("café"), "caf");  // "é" may start "é!": held whole, never half a character
  EXPECT_EQ(u.flush(), "é");
  k3::server::StopMatcher none({});
  EXPECT_FALSE(none.active());
  EXPECT_EQ(none.push("abc"), "abc");
}

}  // namespace
