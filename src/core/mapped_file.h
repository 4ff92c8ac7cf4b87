// MappedFile: a whole file memory-mapped read-only (PROT_READ, MAP_PRIVATE). Pages are read
// lazily by the kernel, so mapping a 16 GB shard costs nothing until its bytes are touched.
// A file truncated while mapped makes the next access to a lost page raise SIGBUS: the first
// MappedFile installs a SIGBUS handler (unless one is already installed) that prints which file
// and byte faulted, then lets the signal end the process (a fault inside a parallel compute
// kernel cannot be unwound safely). Files must not change while they are mapped.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

namespace k3 {

class MappedFile {
 public:
  /// Maps `path` read-only. Throws k3::Error("<path>: cannot open: <strerror>") when the file
  /// cannot be opened, stat'ed or mapped, and "<path>: is a FIFO (named pipe), expected a regular
  /// file" (checked before open(), which would block on a FIFO). An empty file maps to an empty span.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  /// All bytes of the file (size = file size at open time).
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace k3
