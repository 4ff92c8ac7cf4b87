#include "kernels/mxfp8.h"

#include <cmath>
#include <cstring>

#include "core/bf16.h"

namespace k3 {

namespace {
inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// r = x / 2^shared_exp, |r| < 512: nearest E4M3 value (RNE), saturated to ±448.
inline float e4m3_round(float r) {
  const float a = std::fabs(r);
  float q;
  if (a < 0.015625f) {  // below 2^-6: the subnormal grid, step 2^-9
    q = std::nearbyint(a * 512.f) * (1.f / 512.f);
  } else {  // 3 mantissa bits: RNE on the fp32 pattern (a carry moves to the next binade)
    const uint32_t u = bits(a);
    q = from_bits((u + 0x7FFFFu + ((u >> 20) & 1u)) & ~0xFFFFFu);
  }
  if (q > 448.f) q = 448.f;
  return std::copysign(q, r);
}
}  // namespace

void quantize_mxfp8_bf16(const float* x, int64_t n, uint16_t* out) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + 32 * b;
    uint16_t* ob = out + 32 * b;
    float amax = 0.f;
    bool finite = true;
    for (int i = 0; i < 32; ++i) {
      finite = finite && std::isfinite(xb[i]);
      amax = std::fmax(amax, std::fabs(xb[i]));
    }
    if (!finite) {
      for (int i = 0; i < 32; ++i) ob[i] = 0x7FC0;  // NaN
      continue;
    }
    if (amax == 0.f) {
      for (int i = 0; i < 32; ++i) ob[i] = 0;
      continue;
    }
    int e2;
    (void)std::frexp(amax, &e2);  // amax = m·2^e2, m in [0.5, 1): floor(log2 amax) = e2 − 1
    int shared = e2 - 1 - 8;
    if (shared < -127) shared = -127;
    if (shared > 127) shared = 127;
    const float inv = std::ldexp(1.f, -shared), sc = std::ldexp(1.f, shared);
    for (int i = 0; i < 32; ++i) {
      // x·2^-shared is exact (a power of two; 2^-shared <= 2^127); q·2^shared is exact unless it
      // falls below bf16's subnormal range (amax < 2^-118), where f32_to_bf16 rounds it.
      const float q = e4m3_round(xb[i] * inv);
      ob[i] = f32_to_bf16(q * sc);
    }
  }
}

void round_bf16_row(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(x[i]);
  if (n & 1) out[n] = 0;
}

}  // namespace k3
