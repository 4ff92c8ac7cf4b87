// Helpers shared by the AVX2 translation units (compiled with -mavx2 -mfma -mf16c only).
// Everything is in an anonymous namespace: no inline function escapes to other ISAs' TUs.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace k3::avx2 {
namespace {

inline __m256 load_bf16x8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// 2^(e-128) (E8M0 scale with the 1/2 of doubled E2M1 folded in); NaN for e = 0xFF.
inline float e8m0_half(uint32_t e) {
  if (e == 255) return bits_to_f32(0x7fc00000u);
  return bits_to_f32(e >= 2 ? (e - 1) << 23 : (0x00200000u << e));
}

inline float bf16_scalar(const uint16_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return bits_to_f32(static_cast<uint32_t>(h) << 16);
}

}  // namespace
}  // namespace k3::avx2
