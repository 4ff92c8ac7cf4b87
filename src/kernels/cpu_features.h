// CPU feature detection (cpuid + OS support of the vector state via xgetbv), done once.
#pragma once

namespace k3 {

/// What the running CPU (and OS) can execute. All false on non-x86 builds.
struct CpuFeatures {
  bool avx2 = false;    ///< AVX2 + FMA + F16C, OS saves YMM state
  bool avx512 = false;  ///< AVX-512 F/BW/VL + BF16 + VNNI, OS saves ZMM state
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512bf16 = false, avx512vnni = false;
};

/// Detected once (thread-safe static), never throws.
const CpuFeatures& cpu_features();

}  // namespace k3
