// libFuzzer: tokenizer_config.json -> the special-token table (tokenizer/vocab.h) for a fixed
// 256-rank vocabulary. Any input must parse or throw k3::Error; parsed specials lie right after
// the ranks with distinct ids.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string_view>

#include "core/error.h"
#include "tokenizer/vocab.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto sp =
        k3::tok::specials_from_config(std::string_view(reinterpret_cast<const char*>(data), size), 256, "fuzz");
    std::set<int32_t> ids;
    for (const auto& s : sp)
      if (s.id < 256 || !ids.insert(s.id).second) __builtin_trap();
  } catch (const k3::Error&) {
  }
  return 0;
}
