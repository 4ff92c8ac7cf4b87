#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/read_file.h"

namespace k3 {

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path) {
  // The type is checked before open(): open() on a FIFO blocks until a writer appears.
  struct stat pre {};
  if (::stat(path.c_str(), &pre) != 0) throw Error(path.string() + ": cannot open: " + std::strerror(errno));
  if (!S_ISREG(pre.st_mode))
    throw Error(path.string() + ": is a " + file_type_name(pre.st_mode) + ", expected a regular file");
  // O_NONBLOCK: should the path become a FIFO after the stat, open() returns at once (and the
  // fstat below refuses it); it changes nothing for a regular file.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(path.string() + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw Error(path.string() + ": cannot stat: " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path.string() + ": is a " + file_type_name(st.st_mode) + ", expected a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      throw Error(path.string() + ": cannot mmap " + std::to_string(size_) +
                  " bytes: " + std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace k3
