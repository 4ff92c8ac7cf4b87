// Native-width fp32 vectors (GCC vector extensions) for the kernels written once and compiled per
// ISA (vec_impl.h, kda_chunk_impl.h): 4 lanes in the x86-64 baseline build (SSE2), 8 with AVX.
// The AVX-512 table reuses the 8-lane build (avx512/table.cpp); no 16-lane build exists.
// Internal linkage only (anonymous namespace), as the ISA translation-unit rule
// of kernel_table.h requires.
#pragma once
#include <immintrin.h>

#include <cstdint>

// The vector types are passed between internal inline helpers only; GCC's note that their ABI
// differs without AVX concerns external calls, of which there are none.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace k3 {
namespace {
namespace simd {

#if defined(__AVX512F__)
#error "simd_lanes.h has no 16-lane build: include it from baseline or AVX2 translation units only"
#elif defined(__AVX__)
inline constexpr int kLanes = 8;
#else
inline constexpr int kLanes = 4;
#endif

typedef float vf __attribute__((vector_size(4 * kLanes)));
typedef int32_t vi __attribute__((vector_size(4 * kLanes)));

/// Unaligned load / store of kLanes floats.
inline vf loadv(const float* p) {
  vf r;
  __builtin_memcpy(&r, p, sizeof r);
  return r;
}
inline void storev(float* p, vf x) { __builtin_memcpy(p, &x, sizeof x); }

/// a·b + c per lane, explicitly fused where the ISA has FMA, multiply then add in the baseline
/// build. (GCC's C++ default -ffp-contract=fast may also fuse plain a*b+c expressions in the FMA
/// builds: formulas are the same on every ISA, roundings are not bit-identical across ISAs.)
inline vf fmadd(vf a, vf b, vf c) {
#if defined(__FMA__)
  return reinterpret_cast<vf>(
      _mm256_fmadd_ps(reinterpret_cast<__m256>(a), reinterpret_cast<__m256>(b), reinterpret_cast<__m256>(c)));
#else
  return a * b + c;
#endif
}

}  // namespace simd
}  // namespace
}  // namespace k3

#pragma GCC diagnostic pop
