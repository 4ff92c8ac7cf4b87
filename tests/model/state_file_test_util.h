// Test helpers for crafting state-file containers (model/state_file.h: 8-byte magic, u64 header
// length, JSON header, payload, CRC-32 of everything before it): files valid in every respect
// but the one a test changes.
#pragma once
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace k3test {

/// The bytes of file `p` ("" when it cannot be read).
inline std::string read_all(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

/// CRC-32 (zlib) of `s`.
inline uint32_t crc(const std::string& s) {
  return static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(s.size())));
}

/// The JSON header text of container bytes `file`.
inline std::string header_text(const std::string& file) {
  uint64_t n = 0;
  std::memcpy(&n, file.data() + 8, 8);
  return file.substr(16, n);
}

/// Container bytes `file` with the header replaced by `header` (its length updated) and the CRC
/// recomputed; magic and payload unchanged.
inline std::string with_header_text(const std::string& file, const std::string& header) {
  uint64_t n = 0;
  std::memcpy(&n, file.data() + 8, 8);
  const uint64_t m = header.size();
  std::string out = file.substr(0, 8);
  out.append(reinterpret_cast<const char*>(&m), 8);
  out += header;
  out += file.substr(16 + n, file.size() - 16 - n - 4);
  const uint32_t c = crc(out);
  out.append(reinterpret_cast<const char*>(&c), 4);
  return out;
}

}  // namespace k3test
