// k3::Comm's size-1 communicator and the contiguous block split (core/comm.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/comm.h"
#include "core/error.h"

TEST(Comm, SingleProcessAllgathervCopiesThePieceAndCounts) {
  k3::SingleProcessComm c;
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);
  const std::vector<float> mine = {1.5f, -2.f, 3.25f};
  std::vector<float> out(3, 0.f);
  const std::vector<int64_t> counts = {12};
  c.allgatherv(mine.data(), counts, out.data());
  EXPECT_EQ(out, mine);
  // in place (the piece already at its offset) and empty pieces are fine
  c.allgatherv(out.data(), counts, out.data());
  EXPECT_EQ(out, mine);
  c.allgatherv(nullptr, std::vector<int64_t>{0}, out.data());
  uint64_t seed = 7;
  c.broadcast(&seed, sizeof seed, 0);
  EXPECT_EQ(seed, 7u);
  EXPECT_EQ(c.counters().collectives, 4u);
  EXPECT_EQ(c.counters().bytes_sent, 0u);  // one process: nothing leaves it
  EXPECT_EQ(c.counters().bytes_received, 0u);
  c.reset_counters();
  EXPECT_EQ(c.counters().collectives, 0u);
}

TEST(Comm, SingleProcessRefusesBadArguments) {
  k3::SingleProcessComm c;
  float x = 0;
  try {
    c.allgatherv(&x, std::vector<int64_t>{4, 4}, &x);
    FAIL() << "two piece sizes for one rank must be refused";
  } catch (const k3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0: allgatherv: 2 piece sizes for a group of 1"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(c.allgatherv(&x, std::vector<int64_t>{-4}, &x), k3::Error);
  EXPECT_THROW(c.broadcast(&x, 4, 1), k3::Error);
  EXPECT_THROW(c.broadcast(&x, -1, 0), k3::Error);
}

TEST(Comm, SplitRangeIsContiguousBalancedAndOwned) {
  EXPECT_EQ(k3::split_range(6, 4, 0).size(), 2);  // 6 experts on 4 ranks: 2, 2, 1, 1
  EXPECT_EQ(k3::split_range(6, 4, 1).size(), 2);
  EXPECT_EQ(k3::split_range(6, 4, 2).size(), 1);
  EXPECT_EQ(k3::split_range(6, 4, 3).size(), 1);
  EXPECT_EQ(k3::split_range(3, 4, 3).size(), 0);  // a rank with none
  for (int64_t n : {0, 1, 3, 6, 16, 515, 896, 163840})
    for (int ranks : {1, 2, 3, 4, 7, 8}) {
      int64_t next = 0;
      for (int r = 0; r < ranks; ++r) {
        const k3::IndexRange b = k3::split_range(n, ranks, r);
        EXPECT_EQ(b.begin, next) << n << " items, rank " << r << " of " << ranks;
        EXPECT_GE(b.size(), n / ranks);
        EXPECT_LE(b.size(), n / ranks + 1);
        for (int64_t i = b.begin; i < b.end; ++i) ASSERT_EQ(k3::split_owner(n, ranks, i), r) << n << " " << i;
        next = b.end;
      }
      EXPECT_EQ(next, n);
    }
  EXPECT_THROW(k3::split_range(4, 0, 0), k3::Error);
  EXPECT_THROW(k3::split_range(4, 2, 2), k3::Error);
  EXPECT_THROW(k3::split_range(-1, 2, 0), k3::Error);
}
