// config.json parsing and the derived LayerPlan (io/config.h, spec §1).
#include <gtest/gtest.h>

#include <string>

#include "checkpoint_writer.h"
#include "core/error.h"
#include "io/config.h"

using namespace k3;
using nlohmann::json;

namespace {

const std::string kRealConfig = std::string(K3_SOURCE_DIR) + "/tests/io/data/k3_config.json";

std::string error_of(const json& j) {
  try {
    parse_config(j.dump(), "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_CFG_ERR(j, text)                      \
  do {                                               \
    const std::string m = error_of(j);               \
    EXPECT_NE(m.find(text), std::string::npos) << m; \
  } while (0)

}  // namespace

TEST(Config, RealK3Config) {
  ModelConfig c = load_config(kRealConfig);
  EXPECT_EQ(c.architecture, "KimiK3ForConditionalGeneration");
  EXPECT_EQ(c.model_type, "kimi_k3");
  EXPECT_TRUE(c.wrapped);
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.num_hidden_layers, 93);
  EXPECT_EQ(c.vocab_size, 163840);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.mla_norm_eps, 1e-6f);
  EXPECT_EQ(c.attn_res_block_size, 12);
  EXPECT_EQ(c.bos_token_id, 163584);
  EXPECT_EQ(c.eos_token_id, 163586);
  EXPECT_EQ(c.pad_token_id, 163839);
  EXPECT_EQ(c.num_attention_heads, 96);
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_nope_head_dim, 128);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.v_head_dim, 128);
  EXPECT_TRUE(c.mla_use_nope);
  EXPECT_TRUE(c.mla_use_output_gate);
  EXPECT_EQ(c.hidden_act, "situ");
  EXPECT_FLOAT_EQ(c.situ_beta, 4.0f);
  ASSERT_TRUE(c.situ_linear_beta.has_value());
  EXPECT_FLOAT_EQ(*c.situ_linear_beta, 25.0f);
  EXPECT_EQ(c.intermediate_size, 33792);
  EXPECT_EQ(c.num_experts, 896);
  EXPECT_EQ(c.num_experts_per_token, 16);
  EXPECT_EQ(c.num_shared_experts, 2);
  EXPECT_EQ(c.moe_intermediate_size, 3072);
  EXPECT_EQ(c.routed_expert_hidden_size, 3584);
  EXPECT_TRUE(c.latent_moe_use_norm);
  EXPECT_FLOAT_EQ(c.routed_scaling_factor, 1.0f);
  EXPECT_EQ(c.kda_num_heads, 96);
  EXPECT_EQ(c.kda_head_dim, 128);
  EXPECT_EQ(c.short_conv_kernel_size, 4);
  ASSERT_TRUE(c.gate_lower_bound.has_value());
  EXPECT_FLOAT_EQ(*c.gate_lower_bound, -5.0f);
  EXPECT_TRUE(c.use_full_rank_gate);
  EXPECT_EQ(c.quant_method, "compressed-tensors");
  EXPECT_EQ(c.quant_format, "mxfp4-pack-quantized");
  EXPECT_EQ(c.quant_group_size, 32);
  EXPECT_EQ(c.max_position_embeddings, 1048576);
  // Plan: 69 KDA + 24 MLA; MLA at 3,7,...,87,91,92; layer 0 dense; snapshots every 12.
  ASSERT_EQ(c.plan.size(), 93u);
  EXPECT_EQ(c.n_kda_layers(), 69);
  EXPECT_EQ(c.n_mla_layers(), 24);
  EXPECT_EQ(c.n_moe_layers(), 92);
  std::vector<int> mla;
  for (int i = 3; i <= 91; i += 4) mla.push_back(i);
  mla.push_back(92);
  EXPECT_EQ(c.mla_layer_indices(), mla);
  EXPECT_EQ(c.plan[0].ffn, FfnKind::Dense);
  EXPECT_EQ(c.plan[0].attn, AttnKind::KDA);
  for (int il = 1; il < 93; ++il) EXPECT_EQ(c.plan[il].ffn, FfnKind::LatentMoE) << il;
  int snaps = 0;
  for (const auto& l : c.plan) {
    EXPECT_EQ(l.snapshot, l.il % 12 == 0);
    snaps += l.snapshot;
  }
  EXPECT_EQ(snaps, 8);
}

TEST(Config, FlatTextConfigAndDefaults) {
  json t = k3test::tiny_config_json()["text_config"];
  // Remove keys with defaults (spec §1.2 "Defaults when a key is absent").
  for (const char* k : {"hidden_act", "activation_situ_beta", "activation_situ_linear_beta", "mla_use_output_gate",
                        "latent_moe_use_norm", "rms_norm_eps", "moe_renormalize", "first_k_dense_replace",
                        "moe_layer_freq", "routed_scaling_factor"})
    t.erase(k);
  t["linear_attn_config"].erase("gate_lower_bound");
  ModelConfig c = parse_config(t.dump(), "flat.json");
  EXPECT_FALSE(c.wrapped);
  EXPECT_EQ(c.architecture, "KimiLinearForCausalLM");
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_FLOAT_EQ(c.situ_beta, 1.0f);
  EXPECT_FALSE(c.situ_linear_beta.has_value());
  EXPECT_FALSE(c.mla_use_output_gate);
  EXPECT_FALSE(c.latent_moe_use_norm);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_TRUE(c.moe_renormalize);  // num_experts_per_token = 2 > 1
  EXPECT_FALSE(c.gate_lower_bound.has_value());
  EXPECT_EQ(c.first_k_dense_replace, 0);
  EXPECT_EQ(c.n_moe_layers(), 5);
  // moe_layer_freq 2 + first_k_dense 1: MoE iff il >= 1 and il % 2 == 0.
  t["moe_layer_freq"] = 2;
  t["first_k_dense_replace"] = 1;
  c = parse_config(t.dump(), "flat.json");
  EXPECT_EQ(c.plan[0].ffn, FfnKind::Dense);
  EXPECT_EQ(c.plan[1].ffn, FfnKind::Dense);
  EXPECT_EQ(c.plan[2].ffn, FfnKind::LatentMoE);
  EXPECT_EQ(c.plan[3].ffn, FfnKind::Dense);
  EXPECT_EQ(c.plan[4].ffn, FfnKind::LatentMoE);
  // model_type alone also dispatches.
  t.erase("architectures");
  EXPECT_EQ(parse_config(t.dump(), "flat.json").model_type, "kimi_linear");
}

TEST(Config, TinyPlan) {
  ModelConfig c = parse_config(k3test::tiny_config_json().dump(), "tiny");
  std::string p;
  for (const auto& l : c.plan) p += l.attn == AttnKind::KDA ? 'K' : 'M';
  EXPECT_EQ(p, "KKMKM");
  EXPECT_TRUE(c.plan[0].snapshot);
  EXPECT_FALSE(c.plan[1].snapshot);
  EXPECT_TRUE(c.plan[3].snapshot);
}

TEST(Config, UnknownArchitecture) {
  json j = k3test::tiny_config_json();
  j["architectures"] = {"DeepseekV3ForCausalLM"};
  EXPECT_CFG_ERR(j, "cfg.json: unknown architecture 'DeepseekV3ForCausalLM'");
}

TEST(Config, FlatKimiLinearWithoutK3Keys) {
  json t = k3test::tiny_config_json()["text_config"];
  t.erase("attn_res_block_size");
  EXPECT_CFG_ERR(t, "lacks the K3 key 'attn_res_block_size'");
}

TEST(Config, MissingRequiredKey) {
  json j = k3test::tiny_config_json();
  j["text_config"].erase("kv_lora_rank");
  EXPECT_CFG_ERR(j, "cfg.json: missing required key 'text_config.kv_lora_rank'");
  j = k3test::tiny_config_json();
  j["text_config"]["linear_attn_config"].erase("head_dim");
  EXPECT_CFG_ERR(j, "missing required key 'text_config.linear_attn_config.head_dim'");
  j = k3test::tiny_config_json();
  j.erase("text_config");
  EXPECT_CFG_ERR(j, "missing required key 'text_config'");
}

TEST(Config, WrongTypes) {
  json j = k3test::tiny_config_json();
  j["text_config"]["hidden_size"] = "64";
  EXPECT_CFG_ERR(j, "key 'text_config.hidden_size': expected an integer, found string");
  j = k3test::tiny_config_json();
  j["text_config"]["hidden_size"] = 64.5;
  EXPECT_CFG_ERR(j, "key 'text_config.hidden_size': expected an integer, found float");
  j = k3test::tiny_config_json();
  j["text_config"]["mla_use_nope"] = 1;
  EXPECT_CFG_ERR(j, "key 'text_config.mla_use_nope': expected a boolean");
  j = k3test::tiny_config_json();
  j["text_config"]["linear_attn_config"]["kda_layers"] = "1,2,4";
  EXPECT_CFG_ERR(j, "key 'text_config.linear_attn_config.kda_layers': expected an array of integers");
}

TEST(Config, InconsistentDims) {
  json j = k3test::tiny_config_json();
  j["text_config"]["linear_attn_config"]["kda_layers"] = {1, 2, 3, 4};
  EXPECT_CFG_ERR(j, "layer 3 is in both linear_attn_config.kda_layers and full_attn_layers");
  j = k3test::tiny_config_json();
  j["text_config"]["linear_attn_config"]["kda_layers"] = {1, 2};
  EXPECT_CFG_ERR(j, "layer 4 (1-indexed) is in neither");
  j = k3test::tiny_config_json();
  j["text_config"]["linear_attn_config"]["full_attn_layers"] = {3, 5, 6};
  EXPECT_CFG_ERR(j, "full_attn_layers entry 6 outside 1..num_hidden_layers=5");
  j = k3test::tiny_config_json();
  j["text_config"]["linear_attn_config"]["kda_layers"] = {0, 1, 2, 4};
  EXPECT_CFG_ERR(j, "kda_layers entry 0 outside 1..num_hidden_layers=5 (lists are 1-indexed)");
  j = k3test::tiny_config_json();
  j["text_config"]["num_experts_per_token"] = 5;
  EXPECT_CFG_ERR(j, "inconsistent config: num_experts_per_token 5 > num_experts 4");
  j = k3test::tiny_config_json();
  j["text_config"]["hidden_size"] = 0;
  EXPECT_CFG_ERR(j, "inconsistent config: hidden_size must be > 0, found 0");
  j = k3test::tiny_config_json();
  j["text_config"]["num_nextn_predict_layers"] = 1;
  EXPECT_CFG_ERR(j, "MTP layers are not supported");
}

TEST(Config, DuplicateKeyAndInvalidJson) {
  std::string s = k3test::tiny_config_json().dump();
  s.insert(1, "\"model_type\":\"x\",");
  try {
    parse_config(s, "dup.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dup.json: duplicate key 'model_type'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_config("{\"a\":", "bad.json"), Error);
  EXPECT_THROW(load_config("/nonexistent/config.json"), Error);
}
