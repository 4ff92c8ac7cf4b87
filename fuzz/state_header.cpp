// libFuzzer: the JSON header of a sequence-state file (model/state_header.h), which
// `k3 run/chat --state-load` and POST /slots/{id}?action=restore read from disk, and its "extra"
// metadata as `k3 run` / `k3 chat` read it back. Only k3::Error may escape; an accepted header's
// "extra" must parse and stay within kMaxJsonDepth.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "core/json_depth.h"
#include "model/state_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
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
