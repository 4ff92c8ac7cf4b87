// Helpers shared by the x86 integer MXFP4 kernels (avx2/mxfp4.cpp, avx512/mxfp4.cpp): the
// E8M0-half bit table, a per-thread scratch buffer, and the 12·Σq block offsets of the +12
// weight bias. Everything has internal linkage (unnamed namespace), so each ISA TU gets its own
// copy compiled with its own flags: kernel_table.h forbids shared out-of-line code between ISA
// TUs (the linker could pick one ISA's copy for another). Include only from ISA TUs built with
// at least AVX2.
#pragma once
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>

namespace k3::mxfp4_x86 {
namespace {

// (a plain struct, not std::array: ISA TUs must not instantiate library templates, kernel_table.h)
struct E8m0HalfBits {
  uint32_t v[256];
};
constexpr E8m0HalfBits make_e8m0_half_bits() {
  E8m0HalfBits t{};
  for (uint32_t e = 0; e < 256; ++e) t.v[e] = e == 255 ? 0x7fc00000u : (e >= 2 ? (e - 1) << 23 : (0x00200000u << e));
  return t;
}
constexpr E8m0HalfBits kE8m0Half = make_e8m0_half_bits();
constexpr const uint32_t* kE8m0HalfBits = kE8m0Half.v;

// Per-thread growable scratch without library templates (kernel_table.h: ISA TUs must not
// instantiate std:: templates, whose out-of-line copies the linker could pick for other ISAs).
struct Scratch {
  void* p = nullptr;
  size_t bytes = 0;
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { free(p); }
  void* get(size_t n) {
    if (n > bytes) {
      void* q = realloc(p, n);
      if (q == nullptr) abort();  // a few KiB per thread; out of memory here is not recoverable
      p = q;
      bytes = n;
    }
    return p;
  }
};
inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// 12·Σ_i q[t, 32b+i] for every (t, b): the offset that the +12 weight bias adds to a block dot.
inline void block_offsets(const int8_t* q, int64_t n, int32_t* off) {
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < n; ++i) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * i));
    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, a), ones16);
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 1));
    off[i] = 12 * _mm_cvtsi128_si32(h);
  }
}

}  // namespace
}  // namespace k3::mxfp4_x86
