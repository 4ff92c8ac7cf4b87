// The memory plan (io/memory_plan.h) on the real K3 geometry: the published inventory
// of tests/io/data/k3_config.json (the tensors of the sparse real-geometry checkpoint, summed
// without writing them) planned for 64, 128, 256 and 512 GB machines — what fits, what is refused
// (with numbers and a suggestion), and the arithmetic of every term.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "checkpoint_writer.h"
#include "core/error.h"
#include "io/config.h"
#include "io/memory_plan.h"
#include "io/model_summary.h"

using namespace k3;

namespace {

const std::string kRealConfig = std::string(K3_SOURCE_DIR) + "/tests/io/data/k3_config.json";

struct K3Geometry {
  ModelConfig cfg;
  WeightBytes wb;
};

const K3Geometry& k3_geometry() {
  static const K3Geometry g = [] {
    K3Geometry r;
    r.cfg = load_config(kRealConfig);
    const auto inv = k3test::text_inventory(r.cfg, "language_model.", 128);
    std::vector<TensorBytes> tb;
    tb.reserve(inv.size());
    for (const auto& t : inv) tb.push_back({t.name, t.dtype, t.nbytes()});
    r.wb = weight_bytes(tb);
    return r;
  }();
  return g;
}

MemoryPlan plan(double ram_gb, TrunkType t, int64_t n_ctx = 4096, int64_t np = 1) {
  PlanRequest r;
  r.ram_bytes = static_cast<uint64_t>(ram_gb * 1e9);
  r.trunk = t;
  r.n_ctx = n_ctx;
  r.n_parallel = np;
  r.ram_gbs = 100;
  r.drive_gbs = 7;
  return make_memory_plan(k3_geometry().cfg, k3_geometry().wb, r);
}

}  // namespace

TEST(MemoryPlan, K3WeightBytes) {
  const auto& g = k3_geometry();
  // Routed experts: 92 MoE layers x 896 experts x 3 matrices of 3072 x 3584 at 17/32 byte.
  const uint64_t expert = 3ull * 3072 * 3584 * 17 / 32;
  EXPECT_EQ(expert, 17547264u);
  EXPECT_EQ(g.wb.experts, 92ull * 896 * expert);
  EXPECT_EQ(g.wb.embedding, 163840ull * 7168 * 2);
  // The BF16 trunk is ~113 GB; the F32 vectors are small.
  const double trunk = static_cast<double>(g.wb.bf16 + g.wb.embedding + g.wb.f32);
  EXPECT_GT(trunk, 105e9);
  EXPECT_LT(trunk, 120e9);
  EXPECT_LT(g.wb.f32, 1e9);
  EXPECT_EQ(trunk_matrix_bytes(64, TrunkType::Q8), 32u + 4u);  // 32 elements: 32 int8 + one fp32 scale
  EXPECT_EQ(trunk_matrix_bytes(64, TrunkType::Q4), 16u + 4u);
}

TEST(MemoryPlan, FourMachinesOnTheRealGeometry) {
  const auto& g = k3_geometry();
  struct Want {
    double ram;
    TrunkType t;
    bool fits;
  };
  for (const Want w : {Want{64, TrunkType::BF16, false}, Want{64, TrunkType::Q8, false}, Want{64, TrunkType::Q4, true},
                       Want{128, TrunkType::BF16, true}, Want{128, TrunkType::Q8, true},
                       Want{256, TrunkType::BF16, true}, Want{512, TrunkType::BF16, true}}) {
    const MemoryPlan p = plan(w.ram, w.t);
    SCOPED_TRACE(p.format());
    EXPECT_EQ(p.fits, w.fits);
    // Arithmetic of every term.
    EXPECT_EQ(p.trunk, g.wb.f32 + g.wb.embedding + trunk_matrix_bytes(g.wb.bf16, w.t));
    EXPECT_EQ(p.states, state_bytes(g.cfg).total(4096));
    // 2 groups of max(2 x 16, 32) experts (a prefill chunk) + 1 group (the prediction) + 16 buffers
    EXPECT_EQ(p.transient, (3ull * 32 + 16) * p.expert_bytes);
    EXPECT_EQ(p.reserve, std::max<uint64_t>(2'000'000'000ull, p.req.ram_bytes / 100 * 3));
    EXPECT_EQ(p.total, p.trunk + p.states + p.prefix_cache + p.transient + p.reserve + p.expert_cache);
    if (w.fits) {
      EXPECT_EQ(p.total, p.req.ram_bytes);  // the cache takes everything left (< all experts here)
      EXPECT_GT(p.expert_cache, 0u);
      EXPECT_TRUE(p.refusal.empty());
    } else {
      EXPECT_EQ(p.expert_cache, 0u);
      EXPECT_NE(p.refusal.find("--trunk-type q4"), std::string::npos) << p.refusal;
      EXPECT_NE(p.refusal.find("needs"), std::string::npos);
    }
    EXPECT_DOUBLE_EQ(p.hit_rate, static_cast<double>(p.expert_cache) / static_cast<double>(p.experts_total));
    // 16 experts x 92 layers per token = 25.8 GB.
    EXPECT_NEAR(p.expert_bytes_per_token, 25.83e9, 0.01e9);
    EXPECT_DOUBLE_EQ(p.drive_bytes_per_token, (1 - p.hit_rate) * p.expert_bytes_per_token);
    const double t = p.ram_bytes_per_token / 100e9 + p.drive_bytes_per_token / 7e9;
    EXPECT_NEAR(p.tokens_per_s_serial, 1 / t, 1e-9);
  }
  // 512 GB with a BF16 trunk caches about a quarter of the experts; 64 GB with q4 a few percent;
  // 128 GB with BF16 fits with a cache of under 1% (the 113.5 GB trunk), q8 leaves 4x more.
  EXPECT_LT(plan(128, TrunkType::BF16).hit_rate, 0.01);
  EXPECT_GT(plan(128, TrunkType::Q8).hit_rate, 0.035);
  const MemoryPlan big = plan(512, TrunkType::BF16), small = plan(64, TrunkType::Q4);
  EXPECT_GT(big.hit_rate, 0.20);
  EXPECT_LT(big.hit_rate, 0.35);
  EXPECT_GT(small.hit_rate, 0.0);
  EXPECT_LT(small.hit_rate, 0.03);
  // The 64 GB machine at 7 GB/s: ~25 GB from the drive per token, about 4 s/token.
  EXPECT_GT(1 / small.tokens_per_s_serial, 3.0);
  EXPECT_LT(1 / small.tokens_per_s_serial, 4.5);
}

TEST(MemoryPlan, RefusalsNameTheirCause) {
  // A huge context: the states dominate and the suggestion names -c.
  const MemoryPlan p = plan(128, TrunkType::Q8, 1'000'000, 8);
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.refusal.find("smaller -c or -np"), std::string::npos) << p.refusal;
  // Mapped experts (no streaming) never fit 512 GB: the suggestion is --stream-experts.
  PlanRequest r;
  r.ram_bytes = 512'000'000'000ull;
  r.stream_experts = false;
  const MemoryPlan m = make_memory_plan(k3_geometry().cfg, k3_geometry().wb, r);
  EXPECT_FALSE(m.fits);
  EXPECT_NE(m.refusal.find("--stream-experts"), std::string::npos) << m.refusal;
  EXPECT_EQ(m.tokens_per_s_serial, 0.0);  // no bandwidths given: no speed
  // An explicit cache larger than what is left: refused with the largest cache that fits.
  PlanRequest c;
  c.ram_bytes = 256'000'000'000ull;
  c.expert_cache_bytes = 200'000'000'000ull;
  const MemoryPlan cp = make_memory_plan(k3_geometry().cfg, k3_geometry().wb, c);
  EXPECT_FALSE(cp.fits);
  EXPECT_NE(cp.refusal.find("--expert-cache-gb"), std::string::npos) << cp.refusal;
  // Bad requests.
  PlanRequest bad;
  EXPECT_THROW(make_memory_plan(k3_geometry().cfg, k3_geometry().wb, bad), Error);  // ram 0
  bad.ram_bytes = 1;
  bad.n_parallel = 0;
  EXPECT_THROW(make_memory_plan(k3_geometry().cfg, k3_geometry().wb, bad), Error);
}

// `k3 info --plan --ranks N` (docs/distributed.md): one rank's share of the full K3 under tensor +
// expert parallelism — the split BF16 matrices by heads / columns / rows, the experts by id
// blocks, the KDA state by heads — checked against the geometry's own arithmetic.
TEST(MemoryPlan, PerRankPlanSplitsTheTrunkExpertsAndState) {
  const auto& g = k3_geometry();
  const ModelConfig& c = g.cfg;
  const RankShare one = rank_share(c, g.wb, 1);
  EXPECT_EQ(one.weights.bf16, g.wb.bf16);  // one rank: everything
  EXPECT_EQ(one.weights.experts, g.wb.experts);
  EXPECT_EQ(one.experts, 896);
  // The split matrices [calc from the config]: KDA 69 layers x (4·C·D + C·d + H·D + D·C), MLA 24 x
  // (q_b + kv_b + g_proj + o_proj), the dense MLP 3·33792·D, the shared experts 92 x 3·6144·D,
  // lm_head V·D; all BF16.
  const uint64_t D = 7168, C = 96 * 128;
  const uint64_t kda = 69 * (4 * C * D + C * 128 + 96 * D + D * C) * 2;
  const uint64_t mla = 24 * (96 * 192 * 1536 + 96 * 256 * 512 + 96 * 128 * D + D * 96 * 128) * 2;
  const uint64_t mlp = (3 * 33792 * D + 92 * 3 * 6144 * D) * 2;
  const uint64_t head = 163840 * D * 2;
  EXPECT_EQ(one.split_bf16, kda + mla + mlp + head);
  EXPECT_LT(one.split_bf16, g.wb.bf16);
  for (int n : {2, 4, 8}) {
    SCOPED_TRACE(n);
    const RankShare s = rank_share(c, g.wb, n);
    EXPECT_EQ(s.experts, 896 / n);
    EXPECT_EQ(s.weights.experts, g.wb.experts / static_cast<uint64_t>(n));
    // Every split dimension divides by 2, 4, 8 in 16-row units or heads (96 heads, 7168 rows, ...).
    EXPECT_NEAR(static_cast<double>(s.split_bf16_rank), static_cast<double>(one.split_bf16) / n, 1e6);
    EXPECT_EQ(s.weights.bf16, g.wb.bf16 - one.split_bf16 + s.split_bf16_rank);
    EXPECT_EQ(s.kda_state, state_bytes(c).kda_total / static_cast<uint64_t>(n));
    EXPECT_EQ(s.weights.embedding, g.wb.embedding);  // replicated
  }
  // 4 x 512 GB: every expert mapped, 16 sequences of 32K tokens: fits per rank (~447 GB), but not
  // at 2 ranks (835 GB), which is refused naming the rank and the numbers.
  PlanRequest r;
  r.ram_bytes = 512'000'000'000ull;
  r.stream_experts = false;
  r.n_ctx = 32768;
  r.n_parallel = 16;
  r.ranks = 4;
  const MemoryPlan p4 = make_memory_plan(c, g.wb, r);
  EXPECT_TRUE(p4.fits) << p4.format();
  EXPECT_EQ(p4.states, 16 * (state_bytes(c).total(32768) - state_bytes(c).kda_total + state_bytes(c).kda_total / 4));
  EXPECT_NE(p4.format().find("one rank of 4"), std::string::npos) << p4.format();
  r.ranks = 2;
  const MemoryPlan p2 = make_memory_plan(c, g.wb, r);
  EXPECT_FALSE(p2.fits);
  EXPECT_NE(p2.refusal.find("rank 0 of 2 (the largest share) needs"), std::string::npos) << p2.refusal;
  EXPECT_NE(p2.refusal.find("512.00 GB"), std::string::npos) << p2.refusal;
  // An uneven split: rank 0 holds the larger block (896 experts on 3 ranks: 299).
  EXPECT_EQ(rank_share(c, g.wb, 3).experts, 299);
  r.ranks = 0;
  EXPECT_THROW((void)make_memory_plan(c, g.wb, r), Error);
}

// `--trunk-memory copy` holds the trunk once (the page cache's copy is dropped), so the plan's
// terms do not change; the report says where the trunk lives. Names parse both ways.
TEST(MemoryPlan, TrunkMemoryCopyHoldsTheTrunkOnce) {
  EXPECT_EQ(trunk_memory_from_name("map"), TrunkMemory::Map);
  EXPECT_EQ(trunk_memory_from_name("copy"), TrunkMemory::Copy);
  EXPECT_EQ(trunk_memory_from_name("mlock"), std::nullopt);
  EXPECT_EQ(trunk_memory_name(TrunkMemory::Copy), "copy");
  EXPECT_EQ(trunk_memory_name(TrunkMemory::Map), "map");
  const MemoryPlan mapped = plan(256, TrunkType::BF16);
  PlanRequest r = mapped.req;
  r.trunk_memory = TrunkMemory::Copy;
  const MemoryPlan copied = make_memory_plan(k3_geometry().cfg, k3_geometry().wb, r);
  EXPECT_EQ(copied.trunk, mapped.trunk);
  EXPECT_EQ(copied.total, mapped.total);
  EXPECT_EQ(copied.expert_cache, mapped.expert_cache);
  EXPECT_NE(copied.format().find("--trunk-memory copy"), std::string::npos) << copied.format();
  EXPECT_NE(mapped.format().find("--trunk-memory map"), std::string::npos) << mapped.format();
}

// The prefetch estimate: p = 1 is the overlapped bound, p = 0 no better than serial, in between
// max(t_ram + (1 - p) t_drive, (2 - p) t_drive).
TEST(MemoryPlan, PrefetchEstimate) {
  PlanRequest r;
  r.ram_bytes = 64'000'000'000ull;
  r.trunk = TrunkType::Q4;
  r.ram_gbs = 30;
  r.drive_gbs = 7;
  const MemoryPlan none = make_memory_plan(k3_geometry().cfg, k3_geometry().wb, r);
  EXPECT_EQ(none.tokens_per_s_prefetch, 0.0);
  const double t_ram = none.ram_bytes_per_token / 30e9, t_drive = none.drive_bytes_per_token / 7e9;
  for (const double p : {1.0, 0.5, 0.0001}) {
    r.prediction_right = p;
    const MemoryPlan m = make_memory_plan(k3_geometry().cfg, k3_geometry().wb, r);
    EXPECT_NEAR(1 / m.tokens_per_s_prefetch, std::max(t_ram + (1 - p) * t_drive, (2 - p) * t_drive), 1e-9);
    EXPECT_LE(m.tokens_per_s_prefetch, m.tokens_per_s_overlapped * (1 + 1e-12));
    EXPECT_NE(m.format().find("with next-layer prefetch right for"), std::string::npos);
  }
  r.prediction_right = 1.0;
  const MemoryPlan full = make_memory_plan(k3_geometry().cfg, k3_geometry().wb, r);
  EXPECT_NEAR(full.tokens_per_s_prefetch, full.tokens_per_s_overlapped, 1e-12);
}
