// `k3 info --check`: a scan of a tensor's bytes for values no trained checkpoint holds — NaN/Inf
// in F32 / BF16 / F16 tensors, and MXFP4 E8M0 scale bytes that are NaN (0xFF) or implausibly
// large (spec k3-architecture.md §4: scale = 2^(e-127); e >= kMaxPlausibleE8M0 + 1 means block
// scales of 2^65 and more, which K3's encoder — exponent floor(log2 amax) - 2 — writes only for
// weights of magnitude beyond 2^67, and whose products overflow fp32 in the expert GEMMs).
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace k3 {

/// Largest E8M0 scale byte the check accepts: 127 + 64 (2^64).
inline constexpr uint8_t kMaxPlausibleE8M0 = 127 + 64;

struct TensorScan {
  uint64_t n_nan = 0;         ///< NaN values (or NaN scale bytes 0xFF)
  uint64_t n_inf = 0;         ///< +-Inf values
  uint64_t n_huge_scale = 0;  ///< E8M0 scale bytes in (kMaxPlausibleE8M0, 0xFF)
  int64_t first_bad = -1;     ///< element index of the first finding, -1 when none
  bool scanned = false;       ///< false for dtypes without non-finite values (integers, packed E2M1)
  bool ok() const { return n_nan == 0 && n_inf == 0 && n_huge_scale == 0; }
  /// e.g. "3 NaN, 1 Inf, first at element 17 (index [0, 17])"; "" when ok().
  std::string describe(const TensorView& t) const;
};

/// Scans t's bytes (touches every byte once). MXFP4 scales are the U8 tensors whose name ends in
/// ".weight_scale"; F32 / BF16 / F16 / F64 are checked for NaN/Inf; other dtypes are not scanned.
TensorScan scan_tensor(const TensorView& t);

}  // namespace k3
