// bfloat16 <-> float32. bf16 is the upper 16 bits of an IEEE-754 binary32.
#pragma once
#include <cstdint>
#include <cstring>

namespace k3 {

/// Exact widening of a bf16 bit pattern to float.
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Round-to-nearest-even narrowing of float to bf16 (NaN stays NaN).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace k3
