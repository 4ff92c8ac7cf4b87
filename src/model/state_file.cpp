// The container of k3's binary state files: see model/state_file.h.
#include "model/state_file.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "core/atomic_file.h"
#include "core/error.h"

namespace k3 {

namespace {

uint32_t crc_update(uint32_t crc, const void* p, size_t n) {
  // zlib's crc32 takes uInt lengths: feed it in pieces.
  uLong c = crc;
  const Bytef* b = static_cast<const Bytef*>(p);
  while (n > 0) {
    const size_t m = std::min<size_t>(n, 1u << 30);
    c = crc32(c, b, static_cast<uInt>(m));
    b += m;
    n -= m;
  }
  return static_cast<uint32_t>(c);
}

/// The container kinds and older formats a reader recognizes, to name what it found.
struct KnownMagic {
  const char* magic;
  const char* what;
};
constexpr KnownMagic kKnown[] = {
    {"K3SEQST1", "a k3 sequence-state file"},
    {"K3PCBLK2", "a k3 prefix-cache block (format 2)"},
    {"K3PCBLK1", "a k3 prefix-cache block of format 1 (u32 header length), which this k3 no longer reads"},
};

std::string printable(std::span<const uint8_t> b) {
  std::string s;
  for (uint8_t c : b) s += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
  return s;
}

}  // namespace

void write_state_file(const std::filesystem::path& file, const StateFileKind& kind, std::string_view header,
                      std::span<const std::span<const std::byte>> payload, const std::string& what, bool durable) {
  AtomicFile f(file.parent_path(), file.filename().string(), what, durable);
  uint32_t crc = crc_update(0, nullptr, 0);
  auto put = [&](const void* p, size_t n) {
    if (n == 0) return;
    f.write(p, n);
    crc = crc_update(crc, p, n);
  };
  const uint64_t n = header.size();
  put(kind.magic, 8);
  put(&n, 8);
  put(header.data(), header.size());
  for (std::span<const std::byte> part : payload) put(part.data(), part.size());
  f.write(&crc, 4);
  f.commit();
}

StateFileView parse_state_file(std::span<const uint8_t> bytes, const StateFileKind& kind, const std::string& file,
                               const std::string& what, uint64_t max_header) {
  const std::string where = what + " '" + file + "'";
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kind.magic, 8) != 0) {
    if (bytes.size() >= 8)
      for (const KnownMagic& k : kKnown)
        if (std::memcmp(bytes.data(), k.magic, 8) == 0)
          throw Error(where + ": bad magic: found \"" + k.magic + "\", " + k.what + "; expected \"" + kind.magic +
                      "\", " + kind.name);
    throw Error(
        where + ": bad magic" +
        (bytes.size() >= 8 ? " \"" + printable(bytes.first(8)) + "\"" : std::string(" (file shorter than 8 bytes)")) +
        ", expected \"" + kind.magic + "\" (not a " + kind.name + ")");
  }
  uint64_t n = 0;
  if (bytes.size() >= 16) std::memcpy(&n, bytes.data() + 8, 8);
  if (bytes.size() < state_file_bytes(0, 0) || n > max_header || n > bytes.size() - state_file_bytes(0, 0))
    throw Error(where + ": bad header length (" + std::to_string(n) + " bytes in a file of " +
                std::to_string(bytes.size()) + "; truncated or not a " + kind.name + ")");
  uint32_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - 4, 4);
  if (crc_update(crc_update(0, nullptr, 0), bytes.data(), bytes.size() - 4) != stored)
    throw Error(where + ": CRC-32 mismatch: the file is corrupt or truncated");
  StateFileView v;
  v.header = std::string_view(reinterpret_cast<const char*>(bytes.data()) + 16, static_cast<size_t>(n));
  v.payload = bytes.subspan(16 + static_cast<size_t>(n), bytes.size() - 16 - static_cast<size_t>(n) - 4);
  return v;
}

}  // namespace k3
