// libFuzzer: a sequence-state file as `k3 run/chat --state-load` and POST
// /slots/{id}?action=restore read it from disk: the container (model/state_file.h: magic, header
// length, CRC-32) when the input starts with a container magic, else the JSON header alone
// (model/state_header.h), and its "extra" metadata as `k3 run` / `k3 chat` read it back. Only
// k3::Error may escape; an accepted header's "extra" must parse and stay within kMaxJsonDepth;
// an accepted container's parts must lie inside the input.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string_view>

#include "core/error.h"
#include "core/json_depth.h"
#include "model/state_file.h"
#include "model/state_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const k3::StateFileKind& kind : {k3::kSequenceStateFile, k3::kPrefixBlockFile})
    if (size >= 8 && std::string_view(text.data(), 8) == kind.magic) {
      try {
        const k3::StateFileView v = k3::parse_state_file(std::span(data, size), kind, "fuzz.bin", "fuzz");
        const auto* end = data + size;
        if (reinterpret_cast<const uint8_t*>(v.header.data()) < data ||
            reinterpret_cast<const uint8_t*>(v.header.data() + v.header.size()) > end || v.payload.data() < data ||
            v.payload.data() + v.payload.size() > end)
          std::abort();
        text = v.header;
      } catch (const k3::Error&) {
        return 0;
      }
    }
  k3::SequenceStateHeader h;
  try {
    h = k3::parse_sequence_state_header(text, "fuzz.bin");
  } catch (const k3::Error&) {
    return 0;
  }
  if (h.extra_json.empty()) return 0;
  if (!k3::json_depth_within(h.extra_json)) std::abort();
  const nlohmann::ordered_json extra = nlohmann::ordered_json::parse(h.extra_json);  // printed by nlohmann: parses
  if (extra.dump() != h.extra_json) std::abort();
  return 0;
}
