// libFuzzer: .npy bytes -> NpyArray (io/npy_reader.h), the parser of `k3 vision --patches`. Any
// input must parse or throw k3::Error; a parsed array holds exactly prod(shape) values.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "io/npy_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const k3::NpyArray a = k3::parse_npy(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    uint64_t n = 1;
    for (int64_t d : a.shape) {
      if (d < 0) __builtin_trap();
      n *= static_cast<uint64_t>(d);
    }
    if (n != a.data.size()) __builtin_trap();
  } catch (const k3::Error&) {
  }
  return 0;
}
