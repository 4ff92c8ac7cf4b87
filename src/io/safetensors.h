// Safetensors parsing (https://github.com/huggingface/safetensors format):
//   [8-byte little-endian u64 N][N bytes of JSON header][data region]
// The header maps tensor name -> {"dtype": str, "shape": [int...], "data_offsets": [begin, end]}
// (offsets relative to the data region) plus an optional "__metadata__" string->string object.
// Used by Checkpoint (spec k3-architecture.md §2.7); parse_safetensors() is also the fuzz entry.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"

namespace k3 {

/// Largest header accepted (bytes). The real K3 shards have headers under 1 MB.
inline constexpr uint64_t kSafetensorsMaxHeader = 100ull * 1000 * 1000;

/// One tensor entry of a safetensors header.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::U8;
  std::vector<int64_t> shape;  ///< outermost first, each >= 0
  uint64_t offset = 0;         ///< absolute byte offset in the file (8 + N + data_offsets[0])
  uint64_t nbytes = 0;         ///< data_offsets[1] - data_offsets[0] == numel * dtype_size
};

/// A validated header. Entries are in data-offset order (ties by name).
struct SafetensorsHeader {
  uint64_t header_len = 0;    ///< N
  uint64_t data_start = 0;    ///< 8 + N
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;  ///< "__metadata__" (empty when absent)
};

/// Parses and validates a whole safetensors file held in memory (`bytes` = every byte of the
/// file). `origin` names the file in errors. Checks: length prefix present (>= 8 bytes),
/// N <= size - 8 and N <= kSafetensorsMaxHeader, valid UTF-8 JSON object without duplicate keys,
/// "__metadata__" an object of strings, every dtype known, shape entries non-negative integers,
/// numel * dtype_size (overflow-checked) == end - begin, begin <= end <= data region size, no two
/// tensors' byte ranges overlap, no empty name. Throws k3::Error naming origin and tensor.
SafetensorsHeader parse_safetensors(std::span<const uint8_t> bytes, const std::string& origin);

/// A safetensors file mapped read-only with its validated header.
class SafetensorsFile {
 public:
  /// Maps and validates `path`; throws k3::Error as parse_safetensors (origin = path).
  explicit SafetensorsFile(const std::filesystem::path& path);
  const SafetensorsHeader& header() const { return header_; }
  const MappedFile& file() const { return file_; }
  /// First byte of `e`'s data inside the mapping (not touched by this call).
  const uint8_t* data(const SafetensorsEntry& e) const { return file_.data() + e.offset; }

 private:
  MappedFile file_;
  SafetensorsHeader header_;
};

}  // namespace k3
