// Shared helpers of the kernel tests: deterministic random data, the ISA loop, tolerances.
// Every SIMD kernel is compared with a scalar fp64 oracle (k3::ref or one written here) over
// sizes that are not multiples of the vector width, for every ISA this CPU supports.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "kernels/dispatch.h"

namespace k3test {

// Tolerances (op -> bound), all relative to the sum of absolute terms of the exact dot product
// (so they hold for cancelling sums too) unless stated.
struct Tol {
  static constexpr double kGemmBf16 = 1e-5;         ///< fp32 accumulation, K <= ~4096
  static constexpr double kGemmBf16DotBf16 = 4e-3;  ///< activations rounded to bf16: 2^-8 (+ fp32)
  static constexpr double kMxfp4F32 = 1e-5;         ///< exact decode + fp32 FMA
  static constexpr double kMxfp4Q8Int = 1e-5;       ///< int path vs fp64 of the same q·s (scales only)
  static constexpr double kSituRel = 2e-6;          ///< |err| <= kSituRel·|ref| + kSituAbs
  static constexpr double kSituAbs = 1e-6;
};

/// The ISAs to test: every supported one. Prints the list once, and the unsupported ones as
/// "not supported on this CPU" (they are not skipped silently: they are simply not in the list).
inline const std::vector<k3::Isa>& isas_under_test() {
  static const std::vector<k3::Isa> v = [] {
    std::vector<k3::Isa> s = k3::supported_isas();
    std::string line = "[kernels] testing ISAs:";
    for (k3::Isa i : s) line += std::string(" ") + k3::isa_name(i);
    for (k3::Isa i : {k3::Isa::Scalar, k3::Isa::Avx2, k3::Isa::Avx512})
      if (!k3::isa_supported(i)) line += std::string("; ") + k3::isa_name(i) + ": not supported on this CPU";
    std::printf("%s\n", line.c_str());
    return s;
  }();
  return v;
}

inline std::vector<float> rand_f32(std::mt19937& g, size_t n, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}
inline std::vector<uint16_t> rand_bf16(std::mt19937& g, size_t n) {
  std::vector<uint16_t> v(n);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (auto& x : v) x = k3::f32_to_bf16(d(g));
  return v;
}
inline std::vector<uint8_t> rand_u8(std::mt19937& g, size_t n, int lo = 0, int hi = 255) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = static_cast<uint8_t>(d(g));
  return v;
}

}  // namespace k3test
