// Element types of safetensors checkpoints (the dtype strings of the safetensors
// header). Sizes in bytes per element.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace k3 {

enum class DType : uint8_t {
  BF16,
  F16,
  F32,
  F64,
  I8,
  U8,
  I16,
  I32,
  I64,
  BOOL,
  F8_E4M3,
  F8_E5M2,
};

/// Bytes per element of `t` (BOOL = 1, F8_* = 1).
size_t dtype_size(DType t);
/// The safetensors spelling ("BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType t);
/// Parses a safetensors dtype string; std::nullopt when unknown.
std::optional<DType> dtype_from_name(std::string_view s);

}  // namespace k3
