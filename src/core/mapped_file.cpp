#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "core/read_file.h"

namespace k3 {

namespace {

// The live mappings, for the SIGBUS handler: a fixed table read without locks (a slot's base is
// published last and cleared first, so the handler never reads a half-written slot).
constexpr int kMaxMaps = 4096;
constexpr size_t kPathBytes = 512;
struct MapSlot {
  std::atomic<uintptr_t> base{0};
  size_t size = 0;
  char path[kPathBytes] = {};
};
MapSlot g_maps[kMaxMaps];
std::mutex g_maps_mu;  // serialises writers only

void put_str(char* buf, size_t& n, size_t cap, const char* s) {
  while (*s && n + 1 < cap) buf[n++] = *s++;
}

void put_u64(char* buf, size_t& n, size_t cap, uint64_t v) {
  char d[24];
  int k = 0;
  do {
    d[k++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v);
  while (k > 0 && n + 1 < cap) buf[n++] = d[--k];
}

// SIGBUS on a mapped file: its pages past the current end do not exist (the file was truncated
// after it was mapped) or its storage failed. The faulting thread may be inside a compute kernel
// of a parallel region, so the process cannot recover safely: the handler names the file and
// returns with the previous action restored (the default, or a sanitizer's or the embedding
// program's handler), so the access faults again and that action ends the process.
struct sigaction g_previous_sigbus {};

void on_sigbus(int, siginfo_t* si, void*) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(si->si_addr);
  for (const MapSlot& m : g_maps) {
    const uintptr_t b = m.base.load(std::memory_order_acquire);
    if (b == 0 || a < b || a - b >= m.size) continue;
    char msg[1024];
    size_t n = 0;
    put_str(msg, n, sizeof msg, "k3: SIGBUS reading '");
    put_str(msg, n, sizeof msg, m.path);
    put_str(msg, n, sizeof msg, "' at byte ");
    put_u64(msg, n, sizeof msg, a - b);
    put_str(msg, n, sizeof msg, " of the ");
    put_u64(msg, n, sizeof msg, m.size);
    put_str(msg, n, sizeof msg,
            " it had when opened: the file was truncated or rewritten in place while k3 ran, or its storage failed. "
            "Model files must not change while k3 runs (replace a file by renaming a new one over it).\n");
    ssize_t w = ::write(2, msg, n);
    (void)w;
    break;
  }
  ::sigaction(SIGBUS, &g_previous_sigbus, nullptr);  // async-signal-safe
  if (si->si_code <= 0) ::raise(SIGBUS);             // sent by a process: nothing re-faults, so raise it again
}

void install_sigbus_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    // A handler already installed (a sanitizer's, the embedding program's) runs after ours.
    if (::sigaction(SIGBUS, nullptr, &g_previous_sigbus) != 0) return;
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, nullptr);
  });
}

void register_map(const uint8_t* data, size_t size, const std::string& path) {
  install_sigbus_handler();
  std::lock_guard<std::mutex> lk(g_maps_mu);
  for (MapSlot& m : g_maps)
    if (m.base.load(std::memory_order_relaxed) == 0) {
      m.size = size;
      std::strncpy(m.path, path.c_str(), kPathBytes - 1);
      m.path[kPathBytes - 1] = '\0';
      m.base.store(reinterpret_cast<uintptr_t>(data), std::memory_order_release);
      return;
    }
  // More than kMaxMaps live mappings: this one faults without the message.
}

void unregister_map(const uint8_t* data) {
  std::lock_guard<std::mutex> lk(g_maps_mu);
  for (MapSlot& m : g_maps)
    if (m.base.load(std::memory_order_relaxed) == reinterpret_cast<uintptr_t>(data)) {
      m.base.store(0, std::memory_order_release);
      return;
    }
}

}  // namespace

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
      throw Error(path.string() + ": cannot mmap " + std::to_string(size_) + " bytes: " + std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
    register_map(data_, size_, path.string());
  }
  ::close(fd);  // the mapping keeps the file alive
}

MappedFile::~MappedFile() {
  if (data_) {
    unregister_map(data_);
    ::munmap(const_cast<uint8_t*>(data_), size_);
  }
}

}  // namespace k3
