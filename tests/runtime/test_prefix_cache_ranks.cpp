// The prefix cache under N ranks (ranks as threads, tests/model/thread_comm_test_util.h): a
// rank's KDA snapshots hold only its heads, yet every rank must pick the same snapshot interval
// and evict the same blocks, or the ranks' engine steps diverge (k3 serve under mpirun).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "../model/test_util.h"
#include "../model/thread_comm_test_util.h"
#include "io/checkpoint.h"
#include "model/k3_model.h"
#include "runtime/generator.h"
#include "runtime/prefix_cache.h"

namespace {

std::vector<int32_t> ids_of(int n, int seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 1 + (i * 37 + seed * 101) % 200;
  return v;
}

struct CacheTrace {
  int64_t snapshot_every = 0;
  uint64_t snapshot_bytes = 0, ram_bytes = 0, ram_blocks = 0, ram_snapshots = 0, evictions = 0;
  std::vector<int64_t> reused;  ///< ids reused by each lookup, in order
  bool operator==(const CacheTrace&) const = default;
};

// Prefills a fixed series of prompts through a cache whose budget holds about four blocks with
// their snapshots, so blocks are evicted along the way.
CacheTrace trace(const k3::Model& m, uint64_t ram) {
  k3::PrefixCacheOptions o;
  o.block_tokens = 64;
  o.ram_bytes = ram;
  k3::PrefixCache cache(m, "test-fingerprint", o);
  CacheTrace t;
  t.snapshot_every = cache.snapshot_every();
  t.snapshot_bytes = cache.snapshot_bytes();
  for (int i = 0; i < 6; ++i) {
    const std::vector<int32_t> ids = ids_of(200, i % 3);  // prompts repeat: hits after evictions
    k3::SequenceState s = m.new_sequence();
    int64_t reused = 0;
    (void)k3::prefill_cached(m, cache, s, ids, 512, nullptr, &reused);
    t.reused.push_back(reused);
  }
  const k3::PrefixCacheStats st = cache.stats();
  t.ram_bytes = st.ram_bytes;
  t.ram_blocks = st.ram_blocks;
  t.ram_snapshots = st.ram_snapshots;
  t.evictions = st.evictions;
  return t;
}

}  // namespace

TEST(PrefixCacheRanks, EveryRankCountsOneProcessBytesAndEvictsTheSameBlocks) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("odd_heads", 1));  // 3 KDA heads: 2 + 1 on 2 ranks
  k3::ModelOptions mo;
  mo.exec.threads = 1;
  uint64_t ram = 0;
  CacheTrace one;
  {
    const k3::Model m(*ck, mo);
    k3::PrefixCacheOptions o;
    o.block_tokens = 64;
    const k3::PrefixCache probe(m, "test-fingerprint", o);
    ram = 4 * (probe.block_mla_bytes() + probe.snapshot_bytes()) + 4096;
    one = trace(m, ram);
    EXPECT_EQ(static_cast<int64_t>(one.snapshot_bytes), m.new_sequence().snapshot_floats() * 4);
  }
  ASSERT_GT(one.evictions, 0u) << "the budget should force evictions";
  for (int n : {2, 3}) {
    std::vector<CacheTrace> got(static_cast<size_t>(n));
    std::vector<int64_t> local(static_cast<size_t>(n));
    k3test::run_ranks(n, [&](int r, std::shared_ptr<k3::Comm> comm) {
      k3::ModelOptions o = mo;
      o.comm = comm;
      const k3::Model m(*ck, o);
      local[static_cast<size_t>(r)] = m.new_sequence().snapshot_floats();
      got[static_cast<size_t>(r)] = trace(m, ram);
    });
    EXPECT_LT(local[1] * 4, static_cast<int64_t>(one.snapshot_bytes)) << "rank 1 holds only its heads";
    for (int r = 0; r < n; ++r) EXPECT_TRUE(got[static_cast<size_t>(r)] == one) << n << " ranks, rank " << r;
  }
}
