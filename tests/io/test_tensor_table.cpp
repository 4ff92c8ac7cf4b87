// The tensor table's typed rows: row order, lookups by role, name matching, the acceptance rule,
// and the errors of a lookup that the config or the layer plan does not allow.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "checkpoint_writer.h"
#include "core/error.h"
#include "io/config.h"
#include "io/tensor_table.h"

using namespace k3;

namespace {

ModelConfig tiny(const nlohmann::json& text_overrides = nlohmann::json::object()) {
  nlohmann::json j = k3test::tiny_config_json();
  for (auto it = text_overrides.begin(); it != text_overrides.end(); ++it) j["text_config"][it.key()] = it.value();
  return parse_config(j.dump(), "tiny");
}

std::string spec_error(const ModelConfig& c, TensorRole r, int il, int e = -1) {
  try {
    tensor_spec(c, r, il, e);
  } catch (const Error& x) {
    return x.what();
  }
  return "(no error)";
}

}  // namespace

TEST(TensorTable, RowsFollowRoleOrderWithUniqueIdsAndPatternsPerGroup) {
  const auto kinds = tensor_kinds();
  ASSERT_EQ(static_cast<int>(kinds.size()), kTensorRoleCount);
  std::set<std::string> ids, patterns;  // patterns unique within a group (KDA and MLA share two)
  for (size_t i = 0; i < kinds.size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(kinds[i].role), i);
    EXPECT_EQ(&tensor_kind(kinds[i].role), &kinds[i]);
    EXPECT_TRUE(ids.insert(kinds[i].id).second) << kinds[i].id;
    EXPECT_TRUE(patterns.insert(std::to_string(static_cast<int>(kinds[i].group)) + kinds[i].pattern).second)
        << kinds[i].pattern;
    EXPECT_FALSE(kinds[i].dtypes.empty()) << kinds[i].id;
    EXPECT_NE(kinds[i].shape, nullptr) << kinds[i].id;
    EXPECT_EQ(kinds[i].present == nullptr, std::string(kinds[i].when).empty()) << kinds[i].id;
  }
}

TEST(TensorTable, LookupByRoleEqualsTheListing) {
  for (const ModelConfig& c : {tiny(), tiny({{"mla_use_output_gate", false},
                                             {"latent_moe_use_norm", false},
                                             {"num_shared_experts", 0},
                                             {"tie_word_embeddings", true}})}) {
    int n = 0;
    for_each_tensor_spec(c, [&](const TensorSpec& s) {
      const TensorSpec t = tensor_spec(c, s.role, s.il, s.expert);
      EXPECT_EQ(t.name, s.name);
      EXPECT_EQ(t.shape, s.shape) << s.name;
      EXPECT_EQ(t.dtypes, s.dtypes) << s.name;
      EXPECT_EQ(t.storage, s.storage) << s.name;
      EXPECT_EQ(t.group, s.group) << s.name;
      EXPECT_TRUE(tensor_present(c, s.role)) << s.name;
      ++n;
    });
    EXPECT_GT(n, 50);
  }
}

TEST(TensorTable, NamesAndShapesOfTypedLookups) {
  const ModelConfig c = tiny();
  // layer 0: KDA + dense; layer 2: MLA + LatentMoE (tiny_config_json's plan)
  ASSERT_EQ(c.plan[0].attn, AttnKind::KDA);
  ASSERT_EQ(c.plan[2].attn, AttnKind::MLA);
  ASSERT_EQ(c.plan[2].ffn, FfnKind::LatentMoE);
  const TensorSpec q = tensor_spec(c, TensorRole::KdaQProj, 0);
  EXPECT_EQ(q.name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(q.shape, (std::vector<int64_t>{int64_t{c.kda_num_heads} * c.kda_head_dim, c.hidden_size}));
  const TensorSpec a = tensor_spec(c, TensorRole::KdaALog, 0);
  EXPECT_TRUE(a.zero_padded);
  EXPECT_EQ(a.dtypes, std::vector<DType>{DType::F32});
  const TensorSpec kvb = tensor_spec(c, TensorRole::MlaKvB, 2);
  EXPECT_EQ(kvb.name, "model.layers.2.self_attn.kv_b_proj.weight");
  const TensorSpec w2 = tensor_spec(c, TensorRole::ExpertW2, 2, 1);
  EXPECT_EQ(w2.name, "model.layers.2.block_sparse_moe.experts.1.w2");
  EXPECT_EQ(w2.storage, TensorStorage::Mxfp4);
  EXPECT_EQ(w2.expert, 1);
  EXPECT_EQ(w2.shape, (std::vector<int64_t>{c.routed_expert_hidden_size, c.moe_intermediate_size}));
  EXPECT_EQ(tensor_spec(c, TensorRole::LmHead).name, "lm_head.weight");
}

TEST(TensorTable, LookupErrorsNameTheRowAndTheReason) {
  const ModelConfig c = tiny();
  EXPECT_NE(spec_error(c, TensorRole::MlaQA, 0)
                .find("layer 0 has no 'model.layers.{il}.self_attn.q_a_proj.weight' "
                      "(its plan: KDA + dense MLP)"),
            std::string::npos)
      << spec_error(c, TensorRole::MlaQA, 0);
  EXPECT_NE(spec_error(c, TensorRole::InputNorm, c.num_hidden_layers).find("outside [0, 5)"), std::string::npos);
  EXPECT_NE(spec_error(c, TensorRole::FinalNorm, 0).find("is a global tensor, asked for layer 0"), std::string::npos);
  EXPECT_NE(spec_error(c, TensorRole::ExpertW1, 2, c.num_experts).find("expert 4 outside [0, 4)"), std::string::npos);
  EXPECT_NE(spec_error(c, TensorRole::MoeRouter, 2, 0).find("not a routed-expert tensor"), std::string::npos);
  const ModelConfig tied = tiny({{"tie_word_embeddings", true}});
  EXPECT_FALSE(tensor_present(tied, TensorRole::LmHead));
  EXPECT_NE(spec_error(tied, TensorRole::LmHead, -1).find("absent in this config (present when !tie_word_embeddings)"),
            std::string::npos);
  const ModelConfig plain = tiny({{"mla_use_output_gate", false}});
  EXPECT_NE(spec_error(plain, TensorRole::MlaGProj, 2).find("present when mla_use_output_gate"), std::string::npos);
}

TEST(TensorTable, EveryStoredNameMatchesItsRow) {
  const ModelConfig c = tiny();
  for_each_tensor_spec(c, [&](const TensorSpec& s) {
    for (const StoredTensor& t : stored_tensors(s)) {
      const auto m = match_tensor_name(c, t.name);
      ASSERT_TRUE(m.has_value()) << t.name;
      EXPECT_EQ(m->role, s.role) << t.name;
      EXPECT_EQ(m->il, s.il) << t.name;
      EXPECT_EQ(m->expert, s.expert) << t.name;
    }
  });
  const auto m = match_tensor_name(c, "model.layers.4.block_sparse_moe.experts.3.w3.weight_scale");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->role, TensorRole::ExpertW3);
  EXPECT_EQ(m->il, 4);
  EXPECT_EQ(m->expert, 3);
  EXPECT_EQ(m->suffix, ".weight_scale");
  // the shared attention names resolve by the layer's plan
  EXPECT_EQ(match_tensor_name(c, "model.layers.0.self_attn.o_proj.weight")->role, TensorRole::KdaOProj);
  EXPECT_EQ(match_tensor_name(c, "model.layers.2.self_attn.o_proj.weight")->role, TensorRole::MlaOProj);
  EXPECT_FALSE(match_tensor_name(c, "model.layers.4.block_sparse_moe.experts.4.w3").has_value());  // 4 experts
  EXPECT_FALSE(match_tensor_name(c, "model.layers.5.input_layernorm.weight").has_value());         // 5 layers
  EXPECT_FALSE(match_tensor_name(c, "model.layers.0.mlp.gate_proj.weight_packed").has_value());
  EXPECT_FALSE(match_tensor_name(c, "model.layers.1.mlp.gate_proj.weight").has_value());  // layer 1 is LatentMoE
  EXPECT_FALSE(match_tensor_name(c, "model.layers.x.input_layernorm.weight").has_value());
  EXPECT_FALSE(match_tensor_name(c, "vision_tower.patch_embed.proj.weight").has_value());
  EXPECT_FALSE(match_tensor_name(tiny({{"tie_word_embeddings", true}}), "lm_head.weight").has_value());
}

TEST(TensorTable, ExpertMatrixBasesComeFromTheTable) {
  EXPECT_TRUE(is_expert_matrix_base("model.layers.1.block_sparse_moe.experts.0.w1"));
  EXPECT_TRUE(is_expert_matrix_base("model.layers.60.block_sparse_moe.experts.383.w2"));
  EXPECT_TRUE(is_expert_matrix_base("model.layers.007.block_sparse_moe.experts.99999999999.w3"));
  EXPECT_FALSE(is_expert_matrix_base("model.layers.1.block_sparse_moe.experts.0.w4"));
  EXPECT_FALSE(is_expert_matrix_base("model.layers.1.block_sparse_moe.experts.0.w1.weight"));
  EXPECT_FALSE(is_expert_matrix_base("model.layers.1.block_sparse_moe.experts..w1"));
  EXPECT_FALSE(is_expert_matrix_base("model.layers.1.block_sparse_moe.gate"));
}

TEST(TensorTable, NamesByRoleEqualTheSpecsNames) {
  const ModelConfig c = tiny();
  EXPECT_EQ(tensor_name(TensorRole::EmbedTokens), "model.embed_tokens.weight");
  EXPECT_EQ(tensor_name(TensorRole::ExpertW2, 3, 7), "model.layers.3.block_sparse_moe.experts.7.w2");
  for_each_tensor_spec(c, [&](const TensorSpec& s) { EXPECT_EQ(tensor_name(s.role, s.il, s.expert), s.name); });
  EXPECT_EQ(text_tensor_name("language_model.model.norm.weight"), "model.norm.weight");
  EXPECT_EQ(text_tensor_name("model.norm.weight"), "model.norm.weight");
  EXPECT_EQ(text_tensor_name("vision_tower.x"), "vision_tower.x");
}

TEST(TensorTable, OneAcceptanceRule) {
  const ModelConfig c = tiny();
  const TensorSpec a = tensor_spec(c, TensorRole::KdaALog, 0);  // F32 [H], zero-padded along dim 0
  const int64_t H = c.kda_num_heads;
  EXPECT_TRUE(a.accepts_dtype(DType::F32));
  EXPECT_FALSE(a.accepts_dtype(DType::BF16));
  EXPECT_TRUE(a.accepts_shape({H}));
  EXPECT_TRUE(a.accepts_shape({H + 4}));
  EXPECT_FALSE(a.accepts_shape({H - 1}));
  EXPECT_FALSE(a.accepts_shape({1, 1, H, 1}));
  const TensorSpec q = tensor_spec(c, TensorRole::KdaQProj, 0);
  EXPECT_TRUE(q.accepts_dtype(DType::BF16));
  EXPECT_FALSE(q.accepts_dtype(DType::F32));
  EXPECT_TRUE(q.accepts_shape(q.shape));
  EXPECT_FALSE(q.accepts_shape({q.shape[0] + 1, q.shape[1]}));
}
