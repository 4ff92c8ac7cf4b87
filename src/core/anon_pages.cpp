#include "core/anon_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace k3 {

AnonPages::AnonPages(uint64_t bytes, bool huge, const std::string& what) : huge_(huge) {
  if (bytes == 0) return;
  size_ = (bytes + kHugePage - 1) & ~(kHugePage - 1);
  map_bytes_ = size_ + kHugePage;  // slack to start on a 2 MiB boundary
  void* m = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    const int e = errno;
    size_ = map_bytes_ = 0;
    throw Error(what + ": cannot map " + std::to_string(bytes) + " bytes of anonymous memory: " + std::strerror(e));
  }
  map_ = m;
  data_ = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(m) + kHugePage - 1) & ~(kHugePage - 1));
  // advice: a kernel without THP keeps 4 KiB pages, which changes speed, not results
  madvise(data_, size_, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
}

AnonPages::~AnonPages() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
}

AnonPages::AnonPages(AnonPages&& o) noexcept
    : map_(std::exchange(o.map_, nullptr)),
      map_bytes_(std::exchange(o.map_bytes_, 0)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      huge_(o.huge_) {}

AnonPages& AnonPages::operator=(AnonPages&& o) noexcept {
  if (this != &o) {
    if (map_ != nullptr) munmap(map_, map_bytes_);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    huge_ = o.huge_;
  }
  return *this;
}

uint64_t AnonPages::huge_bytes() const {
  if (map_ == nullptr) return 0;
  FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return 0;
  char line[512];
  bool in = false;
  uint64_t kb = 0;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(map_), hi = lo + map_bytes_;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    uintmax_t b = 0, e = 0;
    char dash = 0;
    // a mapping's header line: "start-end perms offset dev inode [path]"
    if (std::sscanf(line, "%jx%c%jx", &b, &dash, &e) == 3 && dash == '-' && std::strchr(line, ':') != nullptr &&
        std::strncmp(line, "AnonHugePages", 13) != 0) {
      // THP can split one mmap into several VMAs (different advice); count every VMA inside it
      in = b >= lo && e <= hi;
      continue;
    }
    uintmax_t v = 0;
    if (in && std::sscanf(line, "AnonHugePages: %ju kB", &v) == 1) kb += v;
  }
  std::fclose(f);
  return kb * 1024;
}

uint64_t page_out(const void* p, uint64_t n) {
#ifdef MADV_PAGEOUT
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
  if (p == nullptr || e <= b) return 0;
  if (madvise(reinterpret_cast<void*>(b), e - b, MADV_PAGEOUT) != 0) return 0;
  return e - b;
#else
  (void)p;
  (void)n;
  return 0;
#endif
}

}  // namespace k3
