// libFuzzer: the tiktoken.model parser alone ("<base64> <rank>" lines, tokenizer/vocab.h).
// Any input must parse or throw k3::Error; a parsed table maps every rank to its bytes and back.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "tokenizer/vocab.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto t = k3::tok::RankTable::parse(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    for (int32_t r = 0; r < t.size(); ++r)
      if (t.find(t.bytes(r)) != r) __builtin_trap();
  } catch (const k3::Error&) {
  }
  return 0;
}
