// Helpers shared by the AVX-512 translation units (compiled with -mavx512f -mavx512bw
// -mavx512vl -mavx512bf16 -mavx512vnni). Anonymous namespace: nothing escapes to other ISAs.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace k3::avx512 {
namespace {

inline __mmask16 tail_mask16(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u); }
inline __mmask32 tail_mask32(int64_t n) { return n >= 32 ? __mmask32(0xFFFFFFFFu) : __mmask32((1u << n) - 1u); }

// 16 bf16 -> 16 fp32 (masked: lanes past n are 0 and not read).
inline __m512 load_bf16x16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m512 load_bf16x16_mask(const uint16_t* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
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

}  // namespace
}  // namespace k3::avx512
