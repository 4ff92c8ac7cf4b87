// Page-in of mapped bytes (core/page_in.h): the pages it counts against a plain set of page
// indices, progress from 0 to the total in non-decreasing steps, residency after the call
// (mincore), a second call that finds everything resident, only the ranges' pages touched (an
// inaccessible guard page on each side), and the errors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/page_in.h"

using namespace k3;

namespace {

const uintptr_t kPage = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

/// Every progress call, in order.
struct Recorder {
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> calls;
  std::vector<std::string> names;
  ProgressFn fn() {
    return [this](std::string_view what, int64_t done, int64_t total) {
      std::lock_guard<std::mutex> lock(mu);
      names.emplace_back(what);
      calls.emplace_back(done, total);
    };
  }
};

/// The progress contract: named "page-in", 0 first, non-decreasing, the last equal to `total`.
void expect_progress(const Recorder& r, uint64_t total, size_t min_calls) {
  ASSERT_GE(r.calls.size(), min_calls);
  EXPECT_EQ(r.calls.front().first, 0);
  for (size_t i = 0; i < r.calls.size(); ++i) {
    EXPECT_EQ(r.names[i], "page-in");
    EXPECT_EQ(r.calls[i].second, static_cast<int64_t>(total));
    if (i > 0) {
      EXPECT_GE(r.calls[i].first, r.calls[i - 1].first) << "call " << i;
    }
  }
  EXPECT_EQ(r.calls.back().first, static_cast<int64_t>(total));
}

/// The reference: bytes of the distinct pages that hold the ranges.
uint64_t pages_of(std::span<const std::span<const uint8_t>> ranges) {
  std::set<uintptr_t> pages;
  for (auto r : ranges)
    for (size_t i = 0; i < r.size(); ++i) pages.insert(reinterpret_cast<uintptr_t>(r.data() + i) / kPage);
  return pages.size() * kPage;
}

/// How many of the pages holding [p, p + n) mincore reports resident.
size_t resident_pages(const uint8_t* p, size_t n) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(p) / kPage * kPage;
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + n + kPage - 1) / kPage * kPage;
  std::vector<unsigned char> v((e - b) / kPage);
  EXPECT_EQ(mincore(reinterpret_cast<void*>(b), e - b, v.data()), 0);
  size_t k = 0;
  for (unsigned char c : v) k += c & 1;
  return k;
}

/// Anonymous private memory: `n` readable pages between two inaccessible guard pages.
struct Guarded {
  uint8_t* base = nullptr;  ///< the first guard page
  size_t n;
  explicit Guarded(size_t pages) : n(pages) {
    void* p = mmap(nullptr, (n + 2) * kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    base = static_cast<uint8_t*>(p);
    EXPECT_EQ(mprotect(base + kPage, n * kPage, PROT_READ), 0);
  }
  ~Guarded() { munmap(base, (n + 2) * kPage); }
  const uint8_t* data() const { return base + kPage; }
};

}  // namespace

TEST(PageIn, ReadsOnlyTheRangesPagesWithProgressToTheTotal) {
  Guarded g(6);
  // unaligned ranges: pages 0-2 (two overlapping ranges), page 4 (one byte); page 3 and 5 are
  // not asked for, the guard pages either side would fault if touched
  const std::vector<std::span<const uint8_t>> ranges = {
      {g.data() + 100, 2 * kPage}, {g.data() + kPage, kPage + 7}, {g.data() + 4 * kPage + 9, 1}, {g.data(), 0}};
  const uint64_t want = pages_of(ranges);
  ASSERT_EQ(want, 4 * kPage);
  ASSERT_EQ(resident_pages(g.data(), 6 * kPage), 0u);  // fresh anonymous memory: nothing mapped yet
  Recorder rec;
  PageInOptions o;
  o.threads = 3;
  o.chunk_bytes = 1;  // rounded up to a page: one progress step per page
  const PageInStats st = page_in(ranges, o, rec.fn());
  EXPECT_EQ(st.bytes, want);
  EXPECT_EQ(st.resident_bytes, 0u);
  EXPECT_EQ(st.read_bytes, want);
  EXPECT_GE(st.seconds, 0.0);
  expect_progress(rec, want, 1 + 4);
  EXPECT_EQ(rec.calls.size(), 5u);
  for (size_t p : {0, 1, 2, 4}) EXPECT_EQ(resident_pages(g.data() + p * kPage, 1), 1u) << "page " << p;
  for (size_t p : {3, 5}) EXPECT_EQ(resident_pages(g.data() + p * kPage, 1), 0u) << "page " << p << " was touched";

  // again: everything is resident, nothing is read
  Recorder again;
  const PageInStats st2 = page_in(ranges, o, again.fn());
  EXPECT_EQ(st2.bytes, want);
  EXPECT_EQ(st2.resident_bytes, want);
  EXPECT_EQ(st2.read_bytes, 0u);
  expect_progress(again, want, 2);
}

TEST(PageIn, MappedFileBytesStayTheSameAndBecomeResident) {
  namespace fs = std::filesystem;
  const fs::path p = fs::path(K3_BINARY_DIR) / ("k3-page-in-" + std::to_string(::getpid()) + ".bin");
  std::vector<uint8_t> bytes(3 * kPage + 123);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  {
    const int fd = ::open(p.c_str(), O_RDONLY);  // evict it from the page cache where the file system allows
    ASSERT_GE(fd, 0);
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  {
    const MappedFile m(p);
    const std::vector<std::span<const uint8_t>> ranges = {m.bytes()};
    Recorder rec;
    PageInOptions o;
    o.chunk_bytes = 2 * kPage;
    const PageInStats st = page_in(ranges, o, rec.fn());
    EXPECT_EQ(st.bytes, 4 * kPage);  // the file's last, partial page included
    EXPECT_EQ(st.resident_bytes + st.read_bytes, st.bytes);
    expect_progress(rec, st.bytes, 1 + 2);
    EXPECT_EQ(resident_pages(m.data(), m.size()), 4u);
    EXPECT_EQ(std::vector<uint8_t>(m.data(), m.data() + m.size()), bytes);
  }
  fs::remove(p);
}

TEST(PageIn, NothingToDoReportsZeroOfZero) {
  Recorder rec;
  const PageInStats st = page_in({}, {}, rec.fn());
  EXPECT_EQ(st.bytes, 0u);
  ASSERT_EQ(rec.calls.size(), 1u);
  EXPECT_EQ(rec.calls[0], std::make_pair(int64_t{0}, int64_t{0}));
}

TEST(PageIn, Errors) {
  Guarded g(1);
  const std::vector<std::span<const uint8_t>> ok = {{g.data(), 10}};
  PageInOptions o;
  o.threads = 0;
  EXPECT_EQ(error_of([&] { page_in(ok, o); }), "page-in: threads must be >= 1, found 0");
  o.threads = 1;
  o.chunk_bytes = 0;
  EXPECT_EQ(error_of([&] { page_in(ok, o); }), "page-in: chunk_bytes must be >= 1, found 0");
  // a range that is no longer mapped
  void* p = mmap(nullptr, 2 * kPage, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_EQ(munmap(p, 2 * kPage), 0);
  const std::vector<std::span<const uint8_t>> gone = {{static_cast<const uint8_t*>(p), kPage}};
  const std::string m = error_of([&] { page_in(gone); });
  EXPECT_EQ(m.rfind("page-in: bytes [0x", 0), 0u) << m;
  EXPECT_NE(m.find(": not a mapped range (mincore: "), std::string::npos) << m;
}
