// libFuzzer: the HTTP request body parser of `k3 serve` (tools/server/openai_request.h): any
// bytes are decoded as JSON and parsed as a chat and a completions request, and an accepted chat
// request is rendered by the K3 chat renderer as the server does (which parses and prints the
// JSON text of tool-call "arguments" strings). Only the server's ApiError (a 400 naming the
// field) or k3::Error may escape.
#include <cstddef>
#include <cstdint>
#include <string>

#include "api_error.h"
#include "core/error.h"
#include "openai_request.h"
#include "tokenizer/chat_k3.h"
#include "tokenizer_fixture.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  k3::server::RequestDefaults defaults;
  defaults.seed_given = true;  // no random_device per input
  nlohmann::ordered_json j;
  try {
    j = k3::server::parse_body(body);
  } catch (const k3::server::ApiError&) {
    return 0;
  }
  try {
    const k3::server::ChatRequest r = k3::server::parse_chat_request(j, defaults);
    (void)k3::encode_chat_segments(k3fuzz::tiny(), k3::build_chat_segments(r.messages, r.chat));
  } catch (const k3::server::ApiError&) {
  } catch (const k3::Error&) {
  }
  try {
    (void)k3::server::parse_completion_request(j, defaults);
  } catch (const k3::server::ApiError&) {
  } catch (const k3::Error&) {
  }
  return 0;
}
