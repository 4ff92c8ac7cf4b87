// The streaming-read probe (kernels/read_bandwidth.h, issue 14): the read_sum kernel of every ISA
// against a plain wrapping sum (integer adds: exact, so the bound is equality), and the probe's
// statistics and errors. Speeds are not asserted (benchmarks show them: k3 bench,
// k3_bench_bandwidth).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/dispatch.h"
#include "kernels/read_bandwidth.h"
#include "kernels/threads.h"

namespace {

uint64_t plain_sum(const uint64_t* x, int64_t n) {
  uint64_t s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];  // wraps mod 2^64
  return s;
}

TEST(ReadSum, EqualsWrappingSumOnEveryIsa) {
  std::mt19937_64 g(14);
  std::vector<uint64_t> x(5000);
  for (auto& v : x) v = g();  // large words: the sum wraps many times
  for (k3::Isa isa : k3test::isas_under_test()) {
    const k3::KernelTable& kt = k3::kernels_for(isa);
    for (int64_t n : {0, 1, 3, 7, 8, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000, 4099})
      for (int64_t off : {0, 1, 5}) {  // 8-byte aligned, not vector aligned
        SCOPED_TRACE(std::string(k3::isa_name(isa)) + " n=" + std::to_string(n) + " off=" + std::to_string(off));
        EXPECT_EQ(kt.read_sum(x.data() + off, n), plain_sum(x.data() + off, n));
      }
  }
}

TEST(ReadProbe, BufferStatisticsAreConsistent) {
  k3::ReadProbeOptions o;
  o.bytes = 64ull << 20;
  o.passes = 3;
  const k3::ReadBandwidth r = k3::measure_read_bandwidth(o);
  EXPECT_EQ(r.bytes, 64ull << 20);
  ASSERT_EQ(r.run_gbs.size(), 3u);
  EXPECT_EQ(r.threads, k3::num_threads());
  EXPECT_TRUE(r.huge_pages);  // the default: the machine's best read, in 2 MiB pages
  EXPECT_GT(r.worst_gbs, 0.0);
  EXPECT_LE(r.worst_gbs, r.median_gbs);
  EXPECT_LE(r.median_gbs, r.best_gbs);
  EXPECT_EQ(r.worst_gbs, *std::min_element(r.run_gbs.begin(), r.run_gbs.end()));
  EXPECT_EQ(r.best_gbs, *std::max_element(r.run_gbs.begin(), r.run_gbs.end()));
  EXPECT_GE(r.spread, 0.0);
  EXPECT_GE(r.timed_page_faults, 0);
  // the buffer is faulted in and read once before timing: timed passes fault no page in
  EXPECT_LT(r.timed_page_faults, 64) << "timed passes took page faults";
}

TEST(ReadProbe, SmallBufferIsRoundedUpAndHugePagesFlagged) {
  k3::ReadProbeOptions o;
  o.bytes = 1000;
  o.passes = 1;
  o.huge_pages = false;
  o.pin_threads = true;
  const k3::ReadBandwidth r = k3::measure_read_bandwidth(o);
  EXPECT_EQ(r.bytes, 64ull << 20);
  EXPECT_FALSE(r.huge_pages);
  EXPECT_EQ(r.run_gbs.size(), 1u);
}

TEST(ReadProbe, RegionsReadTheirAlignedBytes) {
  std::vector<uint64_t> a((3u << 20) / 8, 1), b((1u << 20) / 8 + 3, 2);
  const auto* pb = reinterpret_cast<const uint8_t*>(b.data());
  // b's region starts 3 bytes past a word and ends 3 bytes before one: its partial first and
  // last words (5 bytes each) are skipped, b.size() - 2 words are read
  const k3::MemRegion regs[2] = {{a.data(), a.size() * 8}, {pb + 3, b.size() * 8 - 6}};
  const k3::ReadBandwidth r = k3::measure_region_read_bandwidth(regs, 2, false);
  EXPECT_EQ(r.bytes, a.size() * 8 + (b.size() - 2) * 8);
  EXPECT_EQ(r.run_gbs.size(), 2u);
  EXPECT_GT(r.median_gbs, 0.0);
}

TEST(ReadProbe, BadInputIsAClearError) {
  k3::ReadProbeOptions o;
  o.passes = 0;
  try {
    k3::measure_read_bandwidth(o);
    FAIL() << "passes = 0 accepted";
  } catch (const k3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("passes must be >= 1"), std::string::npos) << e.what();
  }
  std::vector<uint64_t> small(1000);
  const k3::MemRegion tiny{small.data(), small.size() * 8};
  EXPECT_THROW(k3::measure_region_read_bandwidth({&tiny, 1}, 1), k3::Error);  // < 1 MiB
  const k3::MemRegion null_region{nullptr, 4096};
  try {
    k3::measure_region_read_bandwidth({&null_region, 1}, 1);
    FAIL() << "null region accepted";
  } catch (const k3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("region 0 has no data"), std::string::npos) << e.what();
  }
}

}  // namespace
