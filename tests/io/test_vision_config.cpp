// The vision tower's config and tensor rows (vision.md §1.1, §2): vision_config parsing (absent,
// placeholder, tower; refused values), the table's vision rows for the shipped K3 config (168
// tensors, 894,717,952 bytes), lookups, and validation at Checkpoint::open (a wrong-shape or
// missing vision tensor is named; a text-only checkpoint keeps opening).
#include <gtest/gtest.h>

#include <string>

#include "checkpoint_writer.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/config.h"
#include "io/model_summary.h"
#include "io/tensor_table.h"
#include "vision_fixture.h"

using namespace k3;

namespace {

ModelConfig with_vision(const nlohmann::json& vc) {
  nlohmann::json j = k3test::tiny_config_json();
  if (vc.is_null()) j.erase("vision_config");
  else j["vision_config"] = vc;
  return parse_config(j.dump(), "cfg.json");
}

std::string config_error(const nlohmann::json& vc) {
  try {
    with_vision(vc);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string open_error(const k3test::FxCheckpoint& fx) {
  k3test::TempDir d;
  fx.write(d.path());
  try {
    Checkpoint::open(d.path());
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(VisionConfig, AbsentPlaceholderAndTower) {
  const ModelConfig none = with_vision(nullptr);
  EXPECT_FALSE(none.vision.has_value());
  EXPECT_EQ(none.vision_kind, VisionConfigKind::Absent);
  const ModelConfig ph = with_vision({{"hidden_size", 16}, {"num_hidden_layers", 1}});
  EXPECT_FALSE(ph.vision.has_value());
  EXPECT_EQ(ph.vision_kind, VisionConfigKind::Placeholder);
  EXPECT_TRUE(vision_tensors(ph).empty());
  const ModelConfig t = with_vision(k3test::tiny_vision_config_json());
  ASSERT_TRUE(t.vision.has_value());
  EXPECT_EQ(t.vision_kind, VisionConfigKind::Tower);
  EXPECT_EQ(t.vision->hidden_size, 32);
  EXPECT_EQ(t.vision->head_dim(), 16);
  EXPECT_EQ(t.vision->merged_width(), 128);
  EXPECT_EQ(t.vision->pos_emb_height, 6);
  EXPECT_EQ(t.vision->pos_emb_width, 4);
  EXPECT_FLOAT_EQ(t.vision->projector_eps, 1e-5f);
  EXPECT_EQ(kVisionNormEps, 1.0f / 8388608.0f);
}

TEST(VisionConfig, RefusedValuesNameTheKey) {
  auto vc = [](const char* k, nlohmann::json v) {
    nlohmann::json j = k3test::tiny_vision_config_json();
    if (v.is_null()) j.erase(k);
    else j[k] = v;
    return j;
  };
  const std::pair<nlohmann::json, std::string> cases[] = {
      {vc("vt_num_hidden_layers", nullptr), "missing required key 'vision_config.vt_num_hidden_layers'"},
      {vc("vt_hidden_size", "32"), "key 'vision_config.vt_hidden_size': expected an integer"},
      {vc("vt_intermediate_size", 0), "vision_config.vt_intermediate_size': expected a positive integer"},
      {vc("qkv_hidden_size", 33), "qkv_hidden_size': 33 is not a multiple of vt_num_attention_heads 2"},
      {vc("qkv_hidden_size", 36), "head dim 18 (qkv_hidden_size / vt_num_attention_heads) is not a multiple of 4"},
      {vc("pos_emb_interpolation_mode", "bicubic"),
       "vision_config.pos_emb_interpolation_mode': \"bicubic\" is not "
       "supported"},
      {vc("norm_type", "layernorm"), "vision_config.norm_type'"},
      {vc("attn_bias", true), "vision_config.attn_bias': true is not supported"},
      {vc("mm_projector_type", "patchmerger"), "vision_config.mm_projector_type'"},
      {vc("patch_size", 16), "vision_config.patch_size': 16 is not supported"},
      {vc("merge_kernel_size", nlohmann::json::array({2, 4})), "merge_kernel_size': [2, 4] is not supported"},
      {vc("mm_hidden_size", 16), "mm_hidden_size': 16 differs from vt_hidden_size 32"},
      {vc("text_hidden_size", 7168), "text_hidden_size': 7168 differs from the text model's hidden_size 64"},
      {vc("projector_ln_eps", -1), "projector_ln_eps': expected a positive number"},
  };
  for (const auto& [j, needle] : cases) {
    const std::string e = config_error(j);
    EXPECT_NE(e.find("cfg.json"), std::string::npos) << e;
    EXPECT_NE(e.find(needle), std::string::npos) << "want '" << needle << "' in: " << e;
  }
  EXPECT_NE(config_error(nlohmann::json::array()).find("key 'vision_config': expected an object"), std::string::npos);
}

TEST(VisionConfig, ShippedK3ConfigHasTheFullTower) {
  const ModelConfig c = load_config(std::string(K3_SOURCE_DIR) + "/models/k3-config/config.json");
  ASSERT_TRUE(c.vision.has_value());
  const VisionConfig& v = *c.vision;
  EXPECT_EQ(v.num_layers, 27);
  EXPECT_EQ(v.hidden_size, 1024);
  EXPECT_EQ(v.num_heads, 12);
  EXPECT_EQ(v.head_dim(), 128);
  EXPECT_EQ(v.intermediate_size, 4096);
  EXPECT_EQ(v.merged_width(), 4096);
  EXPECT_EQ(v.text_hidden_size, 7168);
  const std::vector<TensorSpec> t = vision_tensors(c);
  ASSERT_EQ(t.size(), 168u);  // 2 + 27·6 + 1 tower + 3 projector (vision.md §2)
  EXPECT_EQ(t.front().name, "vision_tower.patch_embed.proj.weight");
  EXPECT_EQ(t.front().shape, (std::vector<int64_t>{1024, 3, 14, 14}));
  EXPECT_EQ(t[1].shape, (std::vector<int64_t>{64, 64, 1024}));
  EXPECT_EQ(t[3].name, "vision_tower.encoder.blocks.0.wqkv.weight");
  EXPECT_EQ(t[3].shape, (std::vector<int64_t>{4608, 1024}));
  EXPECT_EQ(t[4].shape, (std::vector<int64_t>{1024, 1536}));
  EXPECT_EQ(t[164].name, "vision_tower.encoder.final_layernorm.weight");
  EXPECT_EQ(t[166].name, "mm_projector.proj.2.weight");
  EXPECT_EQ(t[166].shape, (std::vector<int64_t>{7168, 4096}));
  EXPECT_EQ(t[167].name, "mm_projector.post_norm.weight");
  const CheckpointStats st = published_vision_stats(c);
  EXPECT_EQ(st.n_vision, 168);
  EXPECT_EQ(st.vision_bytes, 802428928ull + 92289024ull);  // tower + projector, vision.md §2
  // every name resolves to its row; out-of-range blocks do not
  for (const TensorSpec& s : t) {
    const auto m = match_tensor_name(c, s.name);
    ASSERT_TRUE(m.has_value()) << s.name;
    EXPECT_EQ(m->role, s.role);
    EXPECT_EQ(m->il, s.il);
    EXPECT_EQ(tensor_spec(c, s.role, s.il).shape, s.shape);
  }
  EXPECT_FALSE(match_tensor_name(c, "vision_tower.encoder.blocks.27.wo.weight").has_value());
  try {
    tensor_spec(c, TensorRole::VisionWo, 27);
    ADD_FAILURE() << "block 27 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vision block 27 outside [0, 27)"), std::string::npos) << e.what();
  }
}

TEST(VisionConfig, CheckpointValidatesTheTower) {
  {
    k3test::TempDir d;
    k3test::tiny_vision_checkpoint().write(d.path());
    auto ck = Checkpoint::open(d.path());
    EXPECT_TRUE(ck->config().vision.has_value());
    EXPECT_EQ(checkpoint_stats(*ck).n_vision, 3 + 6 * 2 + 3);
  }
  {  // a wrong shape is named with the expected one
    k3test::FxCheckpoint fx = k3test::tiny_vision_checkpoint();
    k3test::FxTensor& t = k3test::fx_find(fx.tensors, "vision_tower.encoder.blocks.1.wo.weight");
    t.shape = {32, 16};
    t.data.resize(32 * 16 * 2);
    const std::string e = open_error(fx);
    EXPECT_NE(e.find("tensor 'vision_tower.encoder.blocks.1.wo.weight': shape [32, 16], expected [32, 32]"),
              std::string::npos)
        << e;
  }
  {  // a missing one too
    k3test::FxCheckpoint fx = k3test::tiny_vision_checkpoint();
    std::erase_if(fx.tensors, [](const k3test::FxTensor& t) { return t.name == "mm_projector.post_norm.weight"; });
    const std::string e = open_error(fx);
    EXPECT_NE(e.find("missing tensor 'mm_projector.post_norm.weight' (expected BF16 [64]; config.json declares a "
                     "vision tower"),
              std::string::npos)
        << e;
  }
  {  // and an extra vision tensor
    k3test::FxCheckpoint fx = k3test::tiny_vision_checkpoint();
    fx.tensors.push_back({"vision_tower.encoder.blocks.2.wo.weight", DType::BF16, {32, 32}, {}});
    const std::string e = open_error(fx);
    EXPECT_NE(e.find("'vision_tower.encoder.blocks.2.wo.weight': unexpected tensor"), std::string::npos) << e;
  }
  {  // a wrong dtype
    k3test::FxCheckpoint fx = k3test::tiny_vision_checkpoint();
    k3test::FxTensor& t = k3test::fx_find(fx.tensors, "vision_tower.patch_embed.pos_emb.weight");
    t.dtype = DType::F32;
    t.data.resize(t.data.size() * 2);
    const std::string e = open_error(fx);
    EXPECT_NE(e.find("'vision_tower.patch_embed.pos_emb.weight': dtype F32, expected BF16"), std::string::npos) << e;
  }
  {  // text-only (placeholder vision_config): arbitrary vision tensors are skipped, as before
    k3test::TempDir d;
    k3test::tiny_checkpoint().write(d.path());
    auto ck = Checkpoint::open(d.path());
    EXPECT_FALSE(ck->config().vision.has_value());
    EXPECT_EQ(ck->config().vision_kind, VisionConfigKind::Placeholder);
  }
}
