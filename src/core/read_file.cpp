#include "core/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace k3 {

const char* file_type_name(unsigned mode) {
  if (S_ISREG(mode)) return "regular file";
  if (S_ISDIR(mode)) return "directory";
  if (S_ISFIFO(mode)) return "FIFO (named pipe)";
  if (S_ISCHR(mode)) return "character device";
  if (S_ISBLK(mode)) return "block device";
  if (S_ISSOCK(mode)) return "socket";
  if (S_ISLNK(mode)) return "symbolic link";
  return "special file";
}

namespace {

std::string limit_text(const ReadLimits& l) {
  std::string s = "the limit of " + std::to_string(l.max_bytes) + " bytes";
  if (l.max_bytes >= (1u << 20) && l.max_bytes % (1u << 20) == 0)
    s += " (" + std::to_string(l.max_bytes >> 20) + " MiB)";
  if (!l.limit_flag.empty()) s += "; raise it with " + l.limit_flag;
  return s;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

void require_regular_file(const std::filesystem::path& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(what + ": cannot open '" + path.string() + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw Error(what + ": '" + path.string() + "' is a " + file_type_name(st.st_mode) + ", expected a regular file");
}

std::string read_file_bounded(const std::filesystem::path& path, const std::string& what, const ReadLimits& limits) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(what + ": cannot open '" + path.string() + "': " + std::strerror(errno));
  const bool pipe = S_ISFIFO(st.st_mode);
  if (!S_ISREG(st.st_mode) && !(pipe && limits.allow_pipe))
    throw Error(what + ": '" + path.string() + "' is a " + file_type_name(st.st_mode) + ", expected a regular file" +
                (limits.allow_pipe ? " or a pipe" : ""));
  if (!pipe && static_cast<uint64_t>(st.st_size) > limits.max_bytes)
    throw Error(what + ": '" + path.string() + "' is " + std::to_string(st.st_size) + " bytes, larger than " +
                limit_text(limits));
  Fd f;
  // O_NONBLOCK: a regular file never blocks; should the path have been swapped for a FIFO since
  // the stat, open() returns at once and the fstat below refuses it.
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (pipe ? 0 : O_NONBLOCK));
  if (f.fd < 0) throw Error(what + ": cannot open '" + path.string() + "': " + std::strerror(errno));
  if (::fstat(f.fd, &st) != 0 || !(S_ISREG(st.st_mode) || (pipe && S_ISFIFO(st.st_mode))))
    throw Error(what + ": '" + path.string() + "' changed type while being opened, expected a regular file");
  std::string out;
  if (!pipe) out.reserve(static_cast<std::size_t>(st.st_size));
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(what + ": error while reading '" + path.string() + "': " + std::strerror(errno));
    }
    if (n == 0) break;
    if (out.size() + static_cast<uint64_t>(n) > limits.max_bytes)
      throw Error(what + ": '" + path.string() + "' is larger than " + limit_text(limits));
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

}  // namespace k3
