// bind_weights looks every tensor up through the tensor table: the views it binds are the
// checkpoint's own, and a tensor the table's rule refuses (reached through a Checkpoint that did
// not validate at open) is named with the expected and the found dtype and shape.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/tensor_table.h"
#include "model/weights.h"
#include "test_util.h"

namespace {

/// A Checkpoint that forwards to `base` except for the tensors replaced in `over`.
class PatchedCheckpoint final : public k3::Checkpoint {
 public:
  explicit PatchedCheckpoint(const k3::Checkpoint& base) : base_(base) {}
  std::map<std::string, k3::TensorView, std::less<>> over;

  const k3::ModelConfig& config() const override { return base_.config(); }
  const std::filesystem::path& dir() const override { return base_.dir(); }
  const k3::TensorView* find(std::string_view n) const override {
    auto it = over.find(n);
    return it != over.end() ? &it->second : base_.find(n);
  }
  const k3::TensorView& get(std::string_view n) const override {
    const k3::TensorView* v = find(n);
    return v ? *v : base_.get(n);
  }
  k3::Mxfp4Matrix mxfp4(std::string_view b) const override { return base_.mxfp4(b); }
  const std::vector<k3::TensorView>& tensors() const override { return base_.tensors(); }
  int shard_count() const override { return base_.shard_count(); }

 private:
  const k3::Checkpoint& base_;
};

std::string bind_error(const k3::Checkpoint& ck) {
  try {
    k3::bind_weights(ck);
  } catch (const k3::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(WeightsBind, ViewsAreTheCheckpointsTensorsNamedByTheTable) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("k3", 1));
  const k3::ModelConfig& c = ck->config();
  const k3::ModelWeights w = k3::bind_weights(*ck);
  auto view = [&](k3::TensorRole r, int il = -1) { return &ck->get(k3::tensor_spec(c, r, il).name); };
  EXPECT_EQ(w.embed, view(k3::TensorRole::EmbedTokens));
  EXPECT_EQ(w.lm_head, view(k3::TensorRole::LmHead));
  for (int il = 0; il < c.num_hidden_layers; ++il) {
    const k3::LayerWeights& L = w.layers[static_cast<size_t>(il)];
    if (L.spec.attn == k3::AttnKind::KDA) {
      EXPECT_EQ(L.kda.q_proj, view(k3::TensorRole::KdaQProj, il));
      EXPECT_EQ(L.kda.o_proj, view(k3::TensorRole::KdaOProj, il));
      EXPECT_EQ(L.kda.a_log.size(), static_cast<size_t>(c.kda_num_heads));  // padding dropped
    } else {
      EXPECT_EQ(L.mla.kv_b, view(k3::TensorRole::MlaKvB, il));
      EXPECT_EQ(L.mla.g_proj, view(k3::TensorRole::MlaGProj, il));
    }
    if (L.spec.ffn == k3::FfnKind::LatentMoE) {
      EXPECT_EQ(L.moe.router, view(k3::TensorRole::MoeRouter, il));
      ASSERT_EQ(L.moe.experts.size(), static_cast<size_t>(c.num_experts));
      const k3::TensorSpec w3 = k3::tensor_spec(c, k3::TensorRole::ExpertW3, il, c.num_experts - 1);
      EXPECT_EQ(L.moe.experts.back().w3.packed, ck->get(w3.name + ".weight_packed").data);
      EXPECT_EQ(L.moe.experts.back().w3.rows, w3.shape[0]);
    } else {
      EXPECT_EQ(L.dense.down, view(k3::TensorRole::MlpDown, il));
    }
  }
}

TEST(WeightsBind, RefusesWhatTheTableRefuses) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("k3", 1));
  const k3::ModelConfig& c = ck->config();
  {
    PatchedCheckpoint p(*ck);
    const std::string name = k3::tensor_spec(c, k3::TensorRole::KdaALog, 0).name;
    k3::TensorView v = ck->get(name);
    v.dtype = k3::DType::BF16;  // the table accepts F32 only
    p.over.emplace(name, v);
    EXPECT_EQ(bind_error(p), "tensor '" + v.name + "': expected F32[4] (or zero-padded along dim 0), found BF16[8]");
  }
  {
    PatchedCheckpoint p(*ck);
    const std::string name = k3::tensor_spec(c, k3::TensorRole::MlaKvB, 3).name;
    k3::TensorView v = ck->get(name);
    v.shape = {v.shape[1], v.shape[0]};
    p.over.emplace(name, v);
    EXPECT_EQ(bind_error(p), "tensor '" + v.name + "': expected BF16[128, 16], found BF16[16, 128]");
  }
}
