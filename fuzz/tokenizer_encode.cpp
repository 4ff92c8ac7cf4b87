// libFuzzer: encode/decode round trip (with and without specials), the stream decoder and
// the K3 output parser on a synthetic vocabulary. Aborts on any broken invariant.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "tokenizer/chat_output.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/utf8.h"
#include "tokenizer_fixture.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& t = k3fuzz::tiny();
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string valid = k3::tok::utf8_sanitize(text);
  // plain encode: decode gives back the (repaired) text
  const auto ids = t.encode(text);
  if (t.decode(ids) != valid) std::abort();
  // with all specials allowed, decode still gives back the text
  const auto ids2 = t.encode(text, k3::AllowedSpecials::all());
  if (t.decode(ids2) != valid) std::abort();
  // stream decoding of the bytes reinterpreted as ids
  k3::StreamDecoder d(t);
  std::vector<int32_t> raw;
  for (std::size_t i = 0; i + 1 < size; i += 2) raw.push_back(((data[i] << 8) | data[i + 1]) % t.vocab_size());
  std::string s;
  for (int32_t id : raw) {
    const std::string p = d.push(id);
    if (!k3::tok::utf8_valid(p)) std::abort();
    s += p;
  }
  s += d.flush();
  if (s != k3::tok::utf8_sanitize(t.decode(raw))) std::abort();
  // the output parser accepts any id sequence
  const auto parsed = k3::parse_k3_output(t, raw, size % 2 == 0);
  if (!k3::tok::utf8_valid(parsed.reasoning) || !k3::tok::utf8_valid(parsed.content)) std::abort();
  return 0;
}
