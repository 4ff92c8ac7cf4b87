// Overflow-checked unsigned arithmetic for sizes read from untrusted files.
#pragma once
#include <cstdint>
#include <optional>

namespace k3 {

/// a * b, or std::nullopt when the product does not fit in uint64_t.
inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
/// a + b, or std::nullopt on overflow.
inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

}  // namespace k3
