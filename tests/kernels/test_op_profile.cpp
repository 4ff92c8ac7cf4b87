// Per-op timers of `k3 bench --profile` (kernels/op_profile.h): names, what is recorded, and
// that nothing is recorded when off or inside a parallel region.
#include <gtest/gtest.h>

#include <thread>

#include "kernels/op_profile.h"
#include "kernels/threads.h"

namespace {

TEST(OpProfile, OpNameDropsPrefixLayerAndSuffix) {
  EXPECT_EQ(k3::prof::op_name("language_model.model.layers.3.self_attn.q_proj.weight"), "self_attn.q_proj");
  EXPECT_EQ(k3::prof::op_name("language_model.lm_head.weight"), "lm_head");
  EXPECT_EQ(k3::prof::op_name("block_sparse_moe.routed_experts"), "block_sparse_moe.routed_experts");
  EXPECT_EQ(k3::prof::op_name("model.layers.12.mlp.down_proj.weight"), "mlp.down_proj");
  EXPECT_EQ(k3::prof::op_name("layers.7"), "");
}

TEST(OpProfile, RecordsOnlyWhenEnabledAndOutsideParallelRegions) {
  k3::prof::reset();
  k3::prof::set_enabled(false);
  { const k3::prof::Scope s("x.a.weight", 100); }
  EXPECT_TRUE(k3::prof::snapshot().empty());
  k3::prof::set_enabled(true);
  for (int i = 0; i < 3; ++i) {
    const k3::prof::Scope s("language_model.model.layers.1.x.a.weight", 100);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  { const k3::prof::Scope s("language_model.model.layers.2.x.b.weight", 7); }
  const int saved = k3::num_threads();
  k3::set_num_threads(2);
  k3::parallel_for(2, 1, [](int64_t, int64_t) { const k3::prof::Scope s("inside", 1); });
  k3::set_num_threads(saved);
  k3::prof::set_enabled(false);
  const auto v = k3::prof::snapshot();
  ASSERT_GE(v.size(), 2u);
  EXPECT_EQ(v[0].name, "x.a");  // largest time first
  EXPECT_EQ(v[0].calls, 3);
  EXPECT_EQ(v[0].bytes, 300.0);
  EXPECT_GE(v[0].seconds, 0.006);
  EXPECT_EQ(v[1].name, "x.b");
  EXPECT_EQ(v[1].calls, 1);
  // with 2 threads the region ran in parallel (not timed); with 1 hardware thread it runs inline
  // and is timed like any scope
  for (const auto& s : v)
    if (s.name == "inside") EXPECT_LE(s.calls, 1);
  k3::prof::reset();
  EXPECT_TRUE(k3::prof::snapshot().empty());
}

}  // namespace
