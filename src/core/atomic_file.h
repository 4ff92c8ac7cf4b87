// Files k3 writes and later reads back (slot saves, --state-save, the prefix cache's disk tier):
// the directory check, the atomic replace, and the one-process-per-directory lock.
//
// AtomicFile writes into a fresh temporary file "DIR/.NAME.XXXXXXXXXXXX" created with
// O_CREAT|O_EXCL|O_NOFOLLOW (so a symlink or file planted under any name is never opened, and two
// writers of one NAME never share a temporary), then renames it onto DIR/NAME. Readers of NAME see
// either the old file or one complete new file; when several writers race, the last rename wins.
// A symlink planted at DIR/NAME is replaced by the rename, never followed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace k3 {

/// Checks that `dir` may hold files k3 writes and later trusts, creating it (mode 0700, parents
/// included) when absent. It must be a directory (a symlink to one is followed) owned by the
/// effective user and not writable by every user (mode o+w, even with the sticky bit).
/// Errors: k3::Error "<flag>: '<dir>' ..." saying which condition failed and how to fix it.
void check_private_dir(const std::filesystem::path& dir, std::string_view flag);

/// A file NAME in directory DIR replaced atomically. Not copyable; one writer per object.
class AtomicFile {
 public:
  /// Creates the temporary file (mode 0600) in `dir`. `name` must be a plain file name (no '/',
  /// not "." or "..", not empty, no NUL). `durable`: commit() fsyncs the file and the directory.
  /// Errors: k3::Error "<what>: ..." naming the directory or file and strerror.
  AtomicFile(const std::filesystem::path& dir, const std::string& name, std::string what, bool durable = true);
  /// Removes the temporary file unless commit() succeeded.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends `n` bytes. Errors: k3::Error "<what>: cannot write '<path>': <strerror>" (a full
  /// disk reads "No space left on device", a file-size limit "File too large").
  void write(const void* p, size_t n);
  /// Flushes (fsync when durable) and renames the temporary file onto DIR/NAME.
  /// Errors: k3::Error naming the file and strerror; the temporary file is then removed.
  void commit();

  /// DIR/NAME.
  const std::filesystem::path& path() const { return path_; }
  /// Bytes written so far.
  uint64_t bytes() const { return bytes_; }

 private:
  [[noreturn]] void fail(const std::string& action, int err);
  std::filesystem::path path_;
  std::string what_, tmp_name_, name_;
  int dir_fd_ = -1, fd_ = -1;
  bool durable_ = true;
  uint64_t bytes_ = 0;
};

/// Writes `bytes` to DIR/NAME through an AtomicFile. Errors: as AtomicFile.
void write_file_atomic(const std::filesystem::path& dir, const std::string& name, std::string_view bytes,
                       const std::string& what, bool durable = true);

/// An exclusive advisory lock (flock) on a directory, held while the object lives: a second
/// process (or a second lock in this process) on the same directory is refused.
class DirLock {
 public:
  /// Errors: k3::Error "<flag>: '<dir>' is in use by another k3 process ..." when locked
  /// elsewhere, or "<flag>: '<dir>': cannot open: <strerror>". A file system without flock
  /// support (some network file systems) is reported once on stderr and left unlocked.
  DirLock(const std::filesystem::path& dir, std::string_view flag);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace k3
