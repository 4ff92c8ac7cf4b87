// core/anon_pages.h: the 2 MiB-aligned anonymous memory of `--trunk-memory copy` and the read
// probe, and the page-out advice.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "core/anon_pages.h"

TEST(AnonPages, AlignedZeroedMovableMemory) {
  k3::AnonPages empty(0, true, "test");
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.huge_bytes(), 0u);
  EXPECT_FALSE(empty.contains(&empty));

  k3::AnonPages a(3 * k3::AnonPages::kHugePage + 1, true, "test");
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % k3::AnonPages::kHugePage, 0u);
  EXPECT_EQ(a.size(), 4 * k3::AnonPages::kHugePage);  // rounded up to whole 2 MiB pages
  EXPECT_TRUE(a.huge());
  for (uint64_t i = 0; i < a.size(); i += 4096) EXPECT_EQ(a.data()[i], 0) << i;
  std::memset(a.data(), 0x5a, a.size());  // writable everywhere; faults the pages in
  EXPECT_TRUE(a.contains(a.data()));
  EXPECT_TRUE(a.contains(a.data() + a.size() - 1));
  EXPECT_FALSE(a.contains(a.data() + a.size()));
  // huge_bytes reads /proc/self/smaps: at most the mapping, whatever THP mode the kernel runs
  EXPECT_LE(a.huge_bytes(), a.size() + k3::AnonPages::kHugePage);

  uint8_t* p = a.data();
  k3::AnonPages b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from object is empty
  EXPECT_EQ(b.data()[b.size() - 1], 0x5a);
  k3::AnonPages c(k3::AnonPages::kHugePage, false, "test");
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_TRUE(c.huge());  // moved with the memory
}

TEST(AnonPages, PageOutAdvisesWholePagesOnly) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  EXPECT_EQ(k3::page_out(nullptr, 0), 0u);
  void* m = mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* b = static_cast<uint8_t*>(m);
  std::memset(b, 7, 4 * page);
  // less than a whole page inside: nothing advised
  EXPECT_EQ(k3::page_out(b + 1, page), 0u);
  // [1, 4 pages - 1): the two whole pages in the middle (or 0 where the kernel has no MADV_PAGEOUT)
  const uint64_t n = k3::page_out(b + 1, 4 * page - 2);
  EXPECT_TRUE(n == 2 * page || n == 0) << n;
  // the contents survive (anonymous pages without swap stay; file pages are read back)
  for (uint64_t i = 0; i < 4 * page; ++i) ASSERT_EQ(b[i], 7) << i;
  munmap(m, 4 * page);
}
