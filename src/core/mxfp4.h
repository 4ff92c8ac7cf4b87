// MXFP4 (OCP MX v1.0; compressed-tensors "mxfp4-pack-quantized"), spec k3-architecture.md §4,
// algorithms.md §5.1.
//   weight_packed U8 [rows, cols/2]: byte j of a row holds col 2j in the LOW nibble and
//                                    col 2j+1 in the HIGH nibble.
//   weight_scale  U8 [rows, cols/32]: E8M0 biased exponent, scale = 2^(e-127); e = 0xFF is NaN
//                                    in OCP and is refused here.
//   nibble = E2M1: bit 3 sign, bits 2..0 index into {0, .5, 1, 1.5, 2, 3, 4, 6}.
#pragma once
#include <cstdint>
#include <cstring>

namespace k3 {

/// E2M1 code (0..15) -> value.
inline constexpr float kE2M1[16] = {0.f,  0.5f,  1.f,  1.5f,  2.f,  3.f,  4.f,  6.f,
                                    -0.f, -0.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};
/// Doubled E2M1 codes: exact int8 (algorithms.md §5.3).
inline constexpr int8_t kE2M1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/// E8M0 byte -> 2^(e-127), built from bits (e = 0 gives the subnormal 2^-127).
/// The caller must have rejected e == 0xFF (see mxfp4_scale_valid).
inline float e8m0_to_f32(uint8_t e) {
  uint32_t u = e == 0 ? 0x00400000u : static_cast<uint32_t>(e) << 23;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline bool mxfp4_scale_valid(uint8_t e) { return e != 0xFF; }

}  // namespace k3
