// The one container of k3's binary state files: sequence-state files (SequenceState::save /
// load, model/sequence_state.h) and the prefix cache's disk blocks (runtime/prefix_cache_disk.h).
//
//   bytes [0, 8)        magic: 8 ASCII bytes naming the kind and its layout (StateFileKind)
//   bytes [8, 16)       n: u64 little-endian length of the header
//   bytes [16, 16 + n)  the header: a JSON object, {"format", "version", ...} of the kind
//   then                the payload: the arrays the header describes (fp32 little-endian)
//   last 4 bytes        u32 little-endian CRC-32 (zlib) of every byte before it
//
// A reader checks the magic (naming another kind or an older format when it finds one), the
// header length against the file, then the CRC-32, before the kind's parser reads the header
// (bounded by kMaxJsonDepth, core/json_depth.h) and the payload.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace k3 {

/// A kind of container file: its magic and the words error messages use for it.
struct StateFileKind {
  const char* magic;  ///< exactly 8 ASCII characters
  const char* name;   ///< e.g. "k3 sequence-state file"
};

/// Sequence-state files: header version kSequenceStateVersion (model/state_header.h).
inline constexpr StateFileKind kSequenceStateFile{"K3SEQST1", "k3 sequence-state file"};
/// Prefix-cache disk blocks, container layout (the "K3PCBLK1" files had a u32 header length).
inline constexpr StateFileKind kPrefixBlockFile{"K3PCBLK2", "k3 prefix-cache block (format 2)"};

/// Bytes of a container holding a header of `header_bytes` and `payload_bytes` of payload.
inline uint64_t state_file_bytes(uint64_t header_bytes, uint64_t payload_bytes) {
  return 8 + 8 + header_bytes + payload_bytes + 4;
}

/// Writes a container to `file` atomically (core/atomic_file.h: a fresh temporary file in its
/// directory renamed onto it; fsync'ed when `durable`). `payload`: byte ranges written in order.
/// Errors: k3::Error "<what>: ..." naming the file (cannot create, write or rename).
void write_state_file(const std::filesystem::path& file, const StateFileKind& kind, std::string_view header,
                      std::span<const std::span<const std::byte>> payload, const std::string& what,
                      bool durable = true);

/// A container checked for form: its header text and payload bytes (views into the input).
struct StateFileView {
  std::string_view header;
  std::span<const uint8_t> payload;
};

/// Checks `bytes` (a whole file) as a container of `kind` and returns its parts.
/// Errors: k3::Error "<what> '<file>': ..." for a file shorter than a magic or with another
/// magic ("bad magic": names the kind or older format found, and the one expected), a header
/// length above `max_header` or past the end ("bad header length"), a CRC-32 mismatch.
StateFileView parse_state_file(std::span<const uint8_t> bytes, const StateFileKind& kind, const std::string& file,
                               const std::string& what, uint64_t max_header = 256u << 20);

}  // namespace k3
