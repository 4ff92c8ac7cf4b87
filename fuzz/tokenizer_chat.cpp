// libFuzzer: the K3 chat renderer on arbitrary JSON. Only k3::Error may escape (malformed or
// unsupported messages); rendered ids must decode back to the rendered text. The input's depth
// is bounded first, as every caller bounds it (the server's parse_body, `k3 tokenize --chat`).
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/json_depth.h"
#include "tokenizer/chat_k3.h"
#include "tokenizer/utf8.h"
#include "tokenizer_fixture.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!k3::json_depth_within(std::string_view(reinterpret_cast<const char*>(data), size))) return 0;
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(data, data + size);
  } catch (const nlohmann::ordered_json::exception&) {
    return 0;
  }
  try {
    k3::ChatOptions opt;
    nlohmann::ordered_json msgs = j;
    if (j.is_object() && j.contains("messages")) {
      msgs = j["messages"];
      if (j.contains("kwargs")) opt = k3::ChatOptions::from_kwargs(j["kwargs"]);
      if (j.contains("tools")) opt.tools = j["tools"];
    }
    const auto segs = k3::build_chat_segments(msgs, opt);
    const auto ids = k3::encode_chat_segments(k3fuzz::tiny(), segs);
    if (k3fuzz::tiny().decode(ids) != k3::tok::utf8_sanitize(k3::join_chat_segments(segs))) std::abort();
  } catch (const k3::Error&) {
  }
  return 0;
}
