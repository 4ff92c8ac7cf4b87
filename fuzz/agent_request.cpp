// libFuzzer: the Responses and Messages translators of `k3 serve` (tools/server/agent_api.h):
// any bytes are decoded as JSON, translated as a Responses body and as a Messages body (and a
// count_tokens body), the chat bodies they produce are parsed by the chat parser and rendered by
// the K3 chat renderer as the server does; the bytes also go through the Messages stream as a
// tool call's arguments text (parsed at the block's end). Only the server's ApiError (a 400
// naming the field) or k3::Error may escape.
#include <cstddef>
#include <cstdint>
#include <string>

#include "agent_api.h"
#include "api_error.h"
#include "core/error.h"
#include "openai_request.h"
#include "tokenizer/chat_k3.h"
#include "tokenizer_fixture.h"

namespace {

void render(const nlohmann::ordered_json& chat_body, bool responses) {
  k3::server::RequestDefaults defaults;
  defaults.seed_given = true;  // no random_device per input
  const k3::server::ChatRequest r = responses ? k3::server::parse_translated_responses(chat_body, defaults)
                                              : k3::server::parse_chat_request(chat_body, defaults);
  (void)k3::encode_chat_segments(k3fuzz::tiny(), k3::build_chat_segments(r.messages, r.chat));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  {
    k3::server::MessagesStream s(nlohmann::ordered_json{{"content", nlohmann::ordered_json::array()}});
    k3::server::StreamDelta d;
    d.tool_calls.push_back({0, true, "call_1", "f", ""});
    d.tool_calls.push_back({0, false, "", "", body});
    (void)s.push(d);
    (void)s.finish("end_turn", "", 1, 1);
  }
  nlohmann::ordered_json j;
  try {
    j = k3::server::parse_body(body);
  } catch (const k3::server::ApiError&) {
    return 0;
  }
  try {
    (void)k3::server::responses_previous_id(j);
    render(k3::server::translate_responses_request(j, nlohmann::ordered_json::array()).chat_body, true);
  } catch (const k3::server::ApiError&) {
  } catch (const k3::Error&) {
  }
  for (bool count_only : {false, true}) {
    try {
      render(k3::server::translate_messages_request(j, count_only).chat_body, false);
    } catch (const k3::server::ApiError&) {
    } catch (const k3::Error&) {
    }
  }
  return 0;
}
