// `--trunk-memory copy` (model/weights.h copy_trunk, io/memory_plan.h TrunkMemory): the trunk
// copied into 2 MiB-page anonymous memory gives the same logits bit for bit as the mapped trunk
// (prefill and decode, every numerics mode of the process default, 1 and 2 threads), copies
// exactly the streamed trunk matrices, and leaves the embedding, the routed experts and the
// quantized matrices where they were.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/checkpoint.h"
#include "kernels/threads.h"
#include "model/k3_model.h"
#include "model/weights.h"
#include "test_util.h"

namespace {

// prefill of `ids`, then 3 decode steps: every logit row of both phases, concatenated
std::vector<float> run(const k3::Checkpoint& ck, k3::TrunkMemory mem, std::optional<k3::QuantKind> q,
                       k3::TrunkCopyStats* stats = nullptr) {
  k3::ModelOptions mo;
  mo.exec.kernels = k3::ModelKernels::Fast;
  mo.trunk_memory = mem;
  mo.trunk_quant = q;
  const k3::Model m(ck, mo);
  if (stats) *stats = m.trunk_copy();
  auto s = m.new_sequence();
  const std::vector<int32_t> ids = {5, 17, 3, 99, 42, 7, 64, 1};
  std::vector<float> out = m.forward(s, ids, true);
  for (int32_t t : {11, 23, 31}) {
    const std::vector<float> l = m.forward(s, std::span<const int32_t>(&t, 1), false);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "logits differ";
}

}  // namespace

TEST(TrunkMemory, CopyGivesTheMappedLogitsBitForBit) {
  const std::string mini = std::string(K3_SOURCE_DIR) + "/models/k3-mini";
  for (const std::string& dir : {k3test::tiny_checkpoint("k3", 1).string(), mini}) {
    SCOPED_TRACE(dir);
    auto ck = k3::Checkpoint::open(dir);
    for (int threads : {1, 2}) {
      k3::set_num_threads(threads);
      const std::vector<float> mapped = run(*ck, k3::TrunkMemory::Map, std::nullopt);
      k3::TrunkCopyStats st;
      const std::vector<float> copied = run(*ck, k3::TrunkMemory::Copy, std::nullopt, &st);
      EXPECT_GT(st.matrices, 0);
      EXPECT_GT(st.bytes, 0u);
      EXPECT_GE(st.memory.size(), st.bytes);
      expect_same_bits(mapped, copied);
      // the q8 trunk: its encodings are not copied, the rest (routers, kv_b, ...) is
      const std::vector<float> q_mapped = run(*ck, k3::TrunkMemory::Map, k3::QuantKind::Q8);
      k3::TrunkCopyStats qst;
      const std::vector<float> q_copied = run(*ck, k3::TrunkMemory::Copy, k3::QuantKind::Q8, &qst);
      EXPECT_LT(qst.bytes, st.bytes);
      expect_same_bits(q_mapped, q_copied);
    }
    k3::set_num_threads(0);
  }
}

TEST(TrunkMemory, CopiesTheStreamedTrunkOnly) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("k3", 1));
  k3::ModelWeights w = k3::bind_weights(*ck);
  const k3::TensorView* embed = w.embed;
  const k3::TensorView* q_proj = w.layers[1].kda.q_proj;
  const k3::TensorView* router = w.layers[1].moe.router;
  const uint8_t* expert = w.layers[1].moe.experts[0].w1.packed;
  uint64_t mapped_before = 0;
  for (const auto& r : k3::mapped_weight_ranges(w)) mapped_before += r.size();
  const k3::TrunkCopyStats st = k3::copy_trunk(w, /*drop_mapped=*/false);
  ASSERT_GT(st.matrices, 0);
  EXPECT_EQ(st.matrices, static_cast<int64_t>(w.trunk_copy_views.size()));
  uint64_t copied = 0;
  for (const auto& v : w.trunk_copy_views) {
    EXPECT_TRUE(w.trunk_copy.contains(v.data)) << v.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % 64, 0u) << v.name;
    copied += v.nbytes;
  }
  EXPECT_EQ(copied, st.bytes);
  EXPECT_EQ(st.paged_out, 0u);  // drop_mapped false
  // the weights now read the copies, with the same bytes, names and shapes
  EXPECT_TRUE(w.trunk_copy.contains(w.layers[1].kda.q_proj->data));
  EXPECT_EQ(w.layers[1].kda.q_proj->name, q_proj->name);
  EXPECT_EQ(w.layers[1].kda.q_proj->shape, q_proj->shape);
  EXPECT_EQ(std::memcmp(w.layers[1].kda.q_proj->data, q_proj->data, q_proj->nbytes), 0);
  EXPECT_TRUE(w.trunk_copy.contains(w.layers[1].moe.router->data));
  EXPECT_EQ(std::memcmp(w.layers[1].moe.router->data, router->data, router->nbytes), 0);
  EXPECT_TRUE(w.trunk_copy.contains(w.lm_head->data));
  EXPECT_EQ(w.embed, embed);                                 // one row per token: stays mapped
  EXPECT_EQ(w.layers[1].moe.experts[0].w1.packed, expert);  // routed experts stay mapped
  for (const auto& L : w.layers) {
    if (L.spec.attn == k3::AttnKind::MLA) {
      EXPECT_TRUE(w.trunk_copy.contains(L.mla.kv_b->data));
    }
  }
  // page-in (--warm) no longer lists the copied bytes
  uint64_t mapped_after = 0;
  for (const auto& r : k3::mapped_weight_ranges(w)) {
    EXPECT_FALSE(w.trunk_copy.contains(r.data()));
    mapped_after += r.size();
  }
  EXPECT_EQ(mapped_after, mapped_before - copied);
  EXPECT_THROW(k3::copy_trunk(w), k3::Error);  // once
}
