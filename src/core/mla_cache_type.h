// How an MLA latent-cache row [c (kv_lora_rank), k_r (qk_rope_head_dim)] is stored: the
// `--cache-type` of the CLI, counted by the memory plan (io/memory_plan.h) and read by the
// attention ops (kernels/mla_attend.h, which encodes and decodes the rows).
//   F32:  (kvr + dr) fp32, exact (the default).
//   BF16: (kvr + dr) bf16, round-to-nearest-even; relative error per element <= 2^-8 (8 significant bits).
//   FP8:  DeepSeek-V3.2 / FlashMLA layout: c as kvr E4M3 bytes with one fp32 scale per group of
//         128 elements (the last group may be shorter; scale = amax/448, so the group's largest
//         element is ±448 on the E4M3 grid), then the ceil(kvr/128) scales, then k_r in bf16 (the
//         positional part keeps bf16 precision, as in FlashMLA's FP8 KV cache). E4M3 RNE:
//         relative error <= 2^-4 per element, absolute <= 2^-10·scale below 2^-6·scale. A group
//         holding NaN/Inf decodes to NaN (never garbage). K3 (kvr 512, dr 64): 656 bytes per row
//         against 1152 (bf16) and 2304 (f32).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"

namespace k3 {

enum class MlaCacheType : uint8_t { F32 = 0, BF16 = 1, FP8 = 2 };

/// "f32", "bf16", "fp8".
inline const char* mla_cache_type_name(MlaCacheType t) {
  switch (t) {
    case MlaCacheType::F32: return "f32";
    case MlaCacheType::BF16: return "bf16";
    case MlaCacheType::FP8: return "fp8";
  }
  return "?";
}

/// The type named `s`. Errors: k3::Error "cache type 'x': expected f32, bf16 or fp8" (callers
/// prefix the flag or field that carried it).
inline MlaCacheType parse_mla_cache_type(std::string_view s) {
  if (s == "f32") return MlaCacheType::F32;
  if (s == "bf16") return MlaCacheType::BF16;
  if (s == "fp8") return MlaCacheType::FP8;
  throw Error("cache type '" + std::string(s) + "': expected f32, bf16 or fp8");
}

/// E4M3 elements per fp32 scale of the FP8 layout.
inline constexpr int64_t kMlaFp8Group = 128;

/// Bytes of one stored row (kvr + dr values) in type t.
inline int64_t mla_cache_row_bytes(MlaCacheType t, int64_t kvr, int64_t dr) {
  switch (t) {
    case MlaCacheType::F32: return 4 * (kvr + dr);
    case MlaCacheType::BF16: return 2 * (kvr + dr);
    case MlaCacheType::FP8: return kvr + 4 * ((kvr + kMlaFp8Group - 1) / kMlaFp8Group) + 2 * dr;
  }
  return 0;
}

}  // namespace k3
