// libFuzzer target: parse an arbitrary buffer as a whole safetensors file (io/safetensors.h).
// Any input must either parse or throw k3::Error — never crash, leak or hit UB.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    k3::SafetensorsHeader h = k3::parse_safetensors(std::span<const uint8_t>(data, size), "fuzz");
    // Invariants of a successful parse.
    for (const auto& e : h.entries)
      if (e.offset < h.data_start || e.offset + e.nbytes > size) __builtin_trap();
  } catch (const k3::Error&) {
  }
  return 0;
}
