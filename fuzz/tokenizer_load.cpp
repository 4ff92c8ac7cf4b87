// libFuzzer: tiktoken.model and tokenizer_config.json parsing. Input = model text, optionally
// followed by "\0" and a config JSON. Only k3::Error may escape the loader.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const std::size_t z = in.find('\0');
  const std::string model = in.substr(0, z);
  const std::string cfg = z == std::string::npos ? std::string() : in.substr(z + 1);
  try {
    const auto t = k3::Tokenizer::from_strings(model, cfg, "fuzz");
    // A loaded tokenizer must round-trip any text and decode every id.
    const auto ids = t.encode("hello world 123 \xE4\xBD\xA0", k3::AllowedSpecials::all());
    (void)t.decode(ids);
    for (int32_t id = 0; id < t.vocab_size(); ++id) (void)t.token_bytes(id);
  } catch (const k3::Error&) {
  }
  return 0;
}
