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
  uint64_t header_len = 0;  ///< N
  uint64_t data_start = 0;  ///< 8 + N
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

/// The same checks on the first bytes of a file of `file_size` bytes: `bytes` must hold at least
/// the length prefix and the header (8 + N bytes); the data region is not needed.
SafetensorsHeader parse_safetensors_prefix(std::span<const uint8_t> bytes, uint64_t file_size,
                                           const std::string& origin);

/// Reads and validates the header of the file `path` with pread (8 bytes, then the N header
/// bytes): nothing is mapped, so a 16 GB shard costs one small read. The file type is checked
/// before open() ("<path>: is a FIFO (named pipe), expected a regular file"). `file_size`, when
/// given, receives the file's size. Throws k3::Error as parse_safetensors (origin = path).
SafetensorsHeader read_safetensors_header(const std::filesystem::path& path, uint64_t* file_size = nullptr);

/// A safetensors file with its validated header (read with pread) and, unless map_data is
/// false, the whole file mapped read-only for its tensors' data.
class SafetensorsFile {
 public:
  /// Validates `path` and maps it when map_data; throws k3::Error as parse_safetensors (origin = path).
  explicit SafetensorsFile(const std::filesystem::path& path, bool map_data = true);
  const SafetensorsHeader& header() const { return header_; }
  bool mapped() const { return file_ != nullptr; }
  /// First byte of `e`'s data inside the mapping (not touched by this call); nullptr when the
  /// file was opened without mapping.
  const uint8_t* data(const SafetensorsEntry& e) const { return file_ ? file_->data() + e.offset : nullptr; }

 private:
  SafetensorsHeader header_;
  std::unique_ptr<MappedFile> file_;
};

}  // namespace k3
