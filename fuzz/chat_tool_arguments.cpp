// libFuzzer: JSON text in a tool call's "arguments" string, both ways it reaches k3:
//  - in a request: an assistant message's tool_calls[0].function.arguments = the input, checked
//    by the server's request parser and rendered by the K3 chat renderer (which parses and
//    prints it again);
//  - in model output: the input as the body of an `argument` block (type object) and of a raw
//    `json` block, through parse_k3_output and the server's streaming K3StreamParser.
// Only ApiError (a 400 naming the field) and k3::Error may escape; the streamed arguments of an
// `argument` block must be valid JSON whose nesting stays within kMaxJsonDepth.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "api_error.h"
#include "core/error.h"
#include "core/json_depth.h"
#include "openai_request.h"
#include "stream_parser.h"
#include "tokenizer/chat_k3.h"
#include "tokenizer/chat_output.h"
#include "tokenizer_fixture.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string args(reinterpret_cast<const char*>(data), size);
  using OJ = nlohmann::ordered_json;
  OJ body = {
      {"messages", OJ::array({OJ{{"role", "user"}, {"content", "q"}},
                              OJ{{"role", "assistant"},
                                 {"content", nullptr},
                                 {"tool_calls", OJ::array({OJ{{"id", "c1"},
                                                              {"type", "function"},
                                                              {"function", OJ{{"name", "f"}, {"arguments", args}}}}})}},
                              OJ{{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "ok"}}})}};
  // The renderer on its own (the CLI's route), then the server's route. (Segments are not
  // BPE-encoded here: that is the tokenizer targets' work, and slow on 256 KiB of text.)
  try {
    (void)k3::build_chat_segments(body["messages"], k3::ChatOptions{});
  } catch (const k3::Error&) {
  }
  try {
    k3::server::RequestDefaults d;
    d.seed_given = true;  // no random_device per input
    const k3::server::ChatRequest r = k3::server::parse_chat_request(body, d);
    (void)k3::build_chat_segments(r.messages, r.chat);
  } catch (const k3::server::ApiError&) {
  } catch (const k3::Error&) {
  }

  // Model output holding the input as an argument value and as a raw json block.
  const k3::Tokenizer& t = k3fuzz::tiny();
  const std::string head = "<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|>";
  const std::pair<std::string, std::string> blocks[] = {
      {"<|open|>argument key=\"v\" type=\"object\"<|sep|>", "<|close|>argument<|sep|><|close|>call<|sep|>"},
      {"<|open|>json type=\"object\"<|sep|>", "<|close|>json<|sep|><|close|>call<|sep|>"}};
  for (const auto& [open, close] : blocks) {
    // The input is text, one single-byte id per byte (the fixture's rank of byte b is b): a
    // marker spelled in it stays text.
    std::vector<int32_t> ids = t.encode(head + open, k3::AllowedSpecials::all());
    for (unsigned char c : args) ids.push_back(static_cast<int32_t>(c));
    for (int32_t id : t.encode(close, k3::AllowedSpecials::all())) ids.push_back(id);
    const k3::ParsedOutput parsed = k3::parse_k3_output(t, ids);
    if (parsed.tool_calls.size() != 1) std::abort();
    k3::server::K3StreamParser p(t, true);
    for (int32_t id : ids) (void)p.push(id);
    (void)p.finish();
    if (p.tool_calls().size() != 1) std::abort();
    if (open.find("argument") != std::string::npos) {
      // {"v": VALUE}: the object adds one level to a value of at most kMaxJsonDepth.
      const std::string& a = p.tool_calls()[0].arguments;
      if (!k3::json_depth_within(a, k3::kMaxJsonDepth + 1) || !OJ::accept(a)) std::abort();
    }
  }
  return 0;
}
