// Bounded, type-checked whole-file reads for every file the engine reads into memory (prompts,
// id lists, config.json, the index, tokenizer files). The file type is checked with stat()
// before open(), so a FIFO or a device in place of a checkpoint file is refused instead of
// blocking in open() or reading without end.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

namespace k3 {

/// Default bound of user inputs (-f prompt files, --ids-file): 1 GiB.
inline constexpr uint64_t kDefaultInputLimit = 1ull << 30;
/// Bound of checkpoint metadata files (config.json, the index, tiktoken.model, tokenizer_config.json).
inline constexpr uint64_t kMetadataFileLimit = 1ull << 30;

struct ReadLimits {
  uint64_t max_bytes = kDefaultInputLimit;
  /// Accept pipes/FIFOs (read until EOF or max_bytes + 1): true for user inputs such as
  /// `-f <(cmd)`; false for checkpoint files (a FIFO there would block forever).
  bool allow_pipe = false;
  /// The flag that raises the limit, named in the error ("" = none).
  std::string limit_flag;
};

/// Refuses anything but a regular file (by stat, following symlinks), before it is opened:
/// k3::Error "<what>: '<path>' is a <type>, expected a regular file". `what` names the flag or
/// the role of the file. Missing file: "<what>: cannot open '<path>': <strerror>".
void require_regular_file(const std::filesystem::path& path, const std::string& what);

/// Reads all of `path`. Errors (k3::Error, naming `what` and the path): missing/unreadable file,
/// a directory / character or block device / socket (or a pipe unless allow_pipe), more than
/// max_bytes bytes ("... is larger than the limit of N bytes (M MiB); raise it with <flag>").
std::string read_file_bounded(const std::filesystem::path& path, const std::string& what,
                              const ReadLimits& limits = {});

/// "regular file", "directory", "FIFO (named pipe)", "character device", "block device",
/// "socket", "symbolic link" or "special file" for a st_mode.
const char* file_type_name(unsigned mode);

}  // namespace k3
