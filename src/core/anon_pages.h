// Anonymous memory in 2 MiB transparent huge pages, for weights copied out of the checkpoint's
// mapping (`--trunk-memory copy`, model/weights.h copy_trunk) and for the read probe's buffer
// (kernels/read_bandwidth.h). One private anonymous mmap, 2 MiB aligned, advised
// madvise(MADV_HUGEPAGE) (the kernel's "madvise" THP mode then backs it with 2 MiB pages when it
// has them; `huge_bytes` says how much it did) or MADV_NOHUGEPAGE (4 KiB pages, for the probe's
// comparison). Why: one core reads 2 MiB-page memory faster than 4 KiB-page memory (fewer TLB
// misses per byte; docs/performance.md "Roofline and decode at K3 widths").
#pragma once
#include <cstdint>
#include <string>

namespace k3 {

class AnonPages {
 public:
  static constexpr uint64_t kHugePage = 2ull << 20;  ///< x86-64 PMD page, bytes

  AnonPages() = default;
  /// Maps `bytes` (rounded up to a multiple of kHugePage; 0 gives an empty object) of zeroed,
  /// writable memory starting on a kHugePage boundary; `huge`: MADV_HUGEPAGE, else
  /// MADV_NOHUGEPAGE. Pages are not touched (the first write faults them in). Errors: k3::Error
  /// naming `what`, the bytes and errno's text when mmap fails.
  AnonPages(uint64_t bytes, bool huge, const std::string& what);
  ~AnonPages();
  AnonPages(AnonPages&& o) noexcept;
  AnonPages& operator=(AnonPages&& o) noexcept;
  AnonPages(const AnonPages&) = delete;
  AnonPages& operator=(const AnonPages&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }  ///< bytes usable from data()
  bool huge() const { return huge_; }
  /// Bytes of [data(), data() + size()) backed by transparent huge pages now (the AnonHugePages
  /// field of /proc/self/smaps for this mapping); 0 when unknown (no /proc) or empty.
  uint64_t huge_bytes() const;
  /// Whether `p` lies inside [data(), data() + size()).
  bool contains(const void* p) const {
    const auto* b = static_cast<const uint8_t*>(p);
    return data_ != nullptr && b >= data_ && b < data_ + size_;
  }

 private:
  void* map_ = nullptr;  ///< what mmap returned
  uint64_t map_bytes_ = 0;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  bool huge_ = false;
};

/// Advice: reclaim the whole pages inside [p, p + n) of a read-only file mapping
/// (madvise(MADV_PAGEOUT), Linux 5.4+): clean page-cache pages that no other process maps leave
/// RAM (the file stays mapped; a later read faults them back in from the drive). The partial
/// pages at either end are left alone. Returns the bytes advised (0 when the range holds no whole
/// page or the kernel refused the advice: it changes no result, so it is not an error).
uint64_t page_out(const void* p, uint64_t n);

}  // namespace k3
