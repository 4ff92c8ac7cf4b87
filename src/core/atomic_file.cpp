// AtomicFile, check_private_dir, DirLock: see atomic_file.h.
#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace k3 {

namespace {

std::string octal_mode(mode_t m) {
  char b[8];
  std::snprintf(b, sizeof b, "%04o", static_cast<unsigned>(m & 07777));
  return b;
}

/// 12 characters of [a-z0-9] from the kernel's random source (a counter mixed in when
/// getrandom is unavailable, so the names still differ within this process).
std::string random_suffix() {
  static std::atomic<uint64_t> counter{0};
  uint64_t v = 0;
  if (::getrandom(&v, sizeof v, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof v))
    v = (static_cast<uint64_t>(::getpid()) << 32) ^ counter.fetch_add(1) ^ reinterpret_cast<uintptr_t>(&v);
  static constexpr char kAlpha[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::string s(12, 'a');
  for (char& c : s) {
    c = kAlpha[v % 36];
    v /= 36;
    if (v == 0) v = counter.fetch_add(1) * 0x9e3779b97f4a7c15ull + 1;
  }
  return s;
}

}  // namespace

void check_private_dir(const std::filesystem::path& dir, std::string_view flag) {
  const std::string f(flag), d = dir.string();
  if (d.empty()) throw Error(f + ": expected a directory, found an empty path");
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) throw Error(f + ": '" + d + "': cannot stat: " + std::strerror(errno));
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw Error(f + ": '" + d + "' does not exist and cannot be created: " + ec.message());
    ::chmod(dir.c_str(), 0700);
    if (::stat(dir.c_str(), &st) != 0) throw Error(f + ": '" + d + "': cannot stat: " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) throw Error(f + ": '" + d + "' is not a directory");
  if (st.st_uid != ::geteuid())
    throw Error(f + ": '" + d + "' is owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
                std::to_string(::geteuid()) +
                "); k3 trusts the files it reads back from there, so it must be a "
                "directory of its own user");
  if (st.st_mode & S_IWOTH)
    throw Error(f + ": '" + d + "' is writable by every user (mode " + octal_mode(st.st_mode) +
                "); k3 trusts the files it reads back from there: use a directory only you can write "
                "(chmod o-w '" +
                d + "')");
}

AtomicFile::AtomicFile(const std::filesystem::path& dir, const std::string& name, std::string what, bool durable)
    : path_(dir / name), what_(std::move(what)), name_(name), durable_(durable) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos)
    throw Error(what_ + ": '" + name + "' is not a plain file name (no '/', not '.' or '..')");
  const std::filesystem::path d = dir.empty() ? std::filesystem::path(".") : dir;
  dir_fd_ = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd_ < 0) throw Error(what_ + ": cannot open directory '" + d.string() + "': " + std::strerror(errno));
  // ".NAME." + 12 random characters, NAME cut so that the whole stays within NAME_MAX (255).
  const std::string stem = "." + name.substr(0, 200) + ".";
  for (int attempt = 0; attempt < 100; ++attempt) {
    tmp_name_ = stem + random_suffix();
    fd_ = ::openat(dir_fd_, tmp_name_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd_ >= 0) return;
    if (errno != EEXIST) break;
  }
  const int e = errno;
  ::close(dir_fd_);
  dir_fd_ = -1;
  throw Error(what_ + ": cannot create a temporary file in '" + d.string() + "' for '" + name +
              "': " + std::strerror(e));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlinkat(dir_fd_, tmp_name_.c_str(), 0);
  }
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

void AtomicFile::fail(const std::string& action, int err) {
  ::close(fd_);
  fd_ = -1;
  ::unlinkat(dir_fd_, tmp_name_.c_str(), 0);
  throw Error(what_ + ": cannot " + action + " '" + path_.string() + "': " + std::strerror(err));
}

void AtomicFile::write(const void* p, size_t n) {
  if (fd_ < 0) throw Error(what_ + ": '" + path_.string() + "' is already committed or failed");
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd_, c, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("write", errno);
    }
    if (w == 0) fail("write", EIO);
    c += w;
    n -= static_cast<size_t>(w);
    bytes_ += static_cast<uint64_t>(w);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) throw Error(what_ + ": '" + path_.string() + "' is already committed or failed");
  if (durable_ && ::fsync(fd_) != 0) fail("flush", errno);
  if (::close(fd_) != 0) {
    const int e = errno;
    fd_ = -1;
    ::unlinkat(dir_fd_, tmp_name_.c_str(), 0);
    throw Error(what_ + ": cannot write '" + path_.string() + "': " + std::strerror(e));
  }
  fd_ = -1;
  if (::renameat(dir_fd_, tmp_name_.c_str(), dir_fd_, name_.c_str()) != 0) {
    const int e = errno;
    ::unlinkat(dir_fd_, tmp_name_.c_str(), 0);
    throw Error(what_ + ": cannot rename the temporary file onto '" + path_.string() + "': " + std::strerror(e));
  }
  if (durable_) ::fsync(dir_fd_);  // the rename itself; a failure here leaves a complete file
}

void write_file_atomic(const std::filesystem::path& dir, const std::string& name, std::string_view bytes,
                       const std::string& what, bool durable) {
  AtomicFile f(dir, name, what, durable);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

DirLock::DirLock(const std::filesystem::path& dir, std::string_view flag) {
  const std::string f(flag), d = dir.string();
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) throw Error(f + ": '" + d + "': cannot open: " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  const int e = errno;
  if (e == EWOULDBLOCK) {
    ::close(fd_);
    fd_ = -1;
    throw Error(f + ": '" + d +
                "' is in use by another k3 process (it holds a lock on the directory); give each "
                "process its own directory");
  }
  std::fprintf(stderr, "k3: %s: cannot lock '%s' (%s): another k3 process could use it at the same time\n", f.c_str(),
               d.c_str(), std::strerror(e));
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace k3
