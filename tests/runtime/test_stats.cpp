// Stats: peak RSS is read from /proc and grows with a touched allocation; the stats line format.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <regex>

#include "runtime/stats.h"

TEST(Stats, PeakRssIsPositiveAndTracksTouchedMemory) {
  const uint64_t before = k3::peak_rss_bytes();
  ASSERT_GT(before, 0u);
  const std::size_t n = 64u << 20;
  auto buf = std::make_unique<char[]>(n);
  std::memset(buf.get(), 1, n);
  volatile char sink = buf[n / 2];
  (void)sink;
  // The peak can only grow, and it must hold at least the touched buffer.
  const uint64_t after = k3::peak_rss_bytes();
  EXPECT_GE(after, before);
  EXPECT_GE(after, (n * 3) / 4);
}

TEST(Stats, LineHasEveryField) {
  k3::RunStats s;
  s.load_ms = 12.4;
  s.n_prompt = 10;
  s.prompt_ms = 500;
  s.n_gen = 4;
  s.gen_ms = 2000;
  s.state_bytes = 3u << 20;
  const std::string l = s.line();
  EXPECT_TRUE(std::regex_search(
      l,
      std::regex(
          R"(^load: 12 ms \| prompt: 10 tok, 20\.00 tok/s \| gen: 4 tok, 2\.00 tok/s \| peak RSS: [0-9.]+ MiB \| state: 3\.00 MiB$)")))
      << l;
  s.n_gen = 0;
  s.show_seed = true;
  s.seed = 99;
  EXPECT_NE(s.line().find("gen: 0 tok, - tok/s"), std::string::npos);
  EXPECT_NE(s.line().find("| seed: 99"), std::string::npos);
}

TEST(Stats, TimerMeasuresElapsedMilliseconds) {
  k3::Timer t;
  volatile double x = 0;
  for (int i = 0; i < 1000000; ++i) x = x + i;
  EXPECT_GT(t.ms(), 0.0);
  EXPECT_LT(t.ms(), 60000.0);
}

TEST(Stats, LineNamesThreadsBeforeSeed) {
  k3::RunStats s;
  s.threads = "2 (passive wait)";
  s.show_seed = true;
  s.seed = 7;
  const std::string l = s.line();
  EXPECT_NE(l.find(" | state: 0.00 MiB | threads: 2 (passive wait) | seed: 7"), std::string::npos) << l;
  s.threads.clear();
  EXPECT_EQ(s.line().find("threads"), std::string::npos);
}
