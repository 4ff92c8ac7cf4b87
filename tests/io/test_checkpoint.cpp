// Checkpoint::open on tiny checkpoints in the published layout, and one test per malformed case.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

#include "checkpoint_writer.h"
#include "core/bf16.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/model_summary.h"
#include "io/tensor_table.h"

using namespace k3;
using k3test::FxCheckpoint;
using k3test::fx_find;
using k3test::TempDir;

namespace {

const std::string P = "language_model.";
const std::string L1 = "model.layers.1.";

std::string open_error(const FxCheckpoint& fx) {
  TempDir d;
  fx.write(d.path());
  try {
    Checkpoint::open(d.path());
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_OPEN_ERR(fx, text)                    \
  do {                                               \
    const std::string m = open_error(fx);            \
    EXPECT_NE(m.find(text), std::string::npos) << m; \
  } while (0)

}  // namespace

TEST(Checkpoint, OpensTinyPublishedLayout) {
  TempDir d;
  FxCheckpoint fx = k3test::tiny_checkpoint();
  // Known values for a BF16 norm and the F32 A_log.
  auto& norm = fx_find(fx.tensors, P + "model.norm.weight");
  norm.data.resize(64 * 2);
  for (int i = 0; i < 64; ++i) {
    uint16_t h = f32_to_bf16(0.25f * i);
    std::memcpy(norm.data.data() + 2 * i, &h, 2);
  }
  fx.write(d.path());
  auto ck = Checkpoint::open(d.path());
  const ModelConfig& c = ck->config();
  EXPECT_EQ(c.num_hidden_layers, 5);
  EXPECT_EQ(ck->shard_count(), 3);
  // Text tensors by prefix-less name; vision tensors listed but not findable as text.
  const TensorView& n = ck->get("model.norm.weight");
  EXPECT_EQ(n.name, P + "model.norm.weight");
  EXPECT_EQ(n.dtype, DType::BF16);
  EXPECT_EQ(n.shape, (std::vector<int64_t>{64}));
  uint16_t h;
  std::memcpy(&h, n.data + 2 * 10, 2);
  EXPECT_EQ(bf16_to_f32(h), 2.5f);
  const TensorView& a = ck->get("model.layers.0.self_attn.A_log");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{4}));
  float av[4];
  std::memcpy(av, a.data, 16);
  EXPECT_EQ(av[0], 0.5f);
  EXPECT_EQ(av[1], 0.75f);
  EXPECT_EQ(av[2], 0.0f);
  EXPECT_EQ(ck->find("vision_tower.final_layernorm.weight"), nullptr);
  EXPECT_EQ(ck->find("nope"), nullptr);
  try {
    ck->get("model.nope.weight");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'language_model.model.nope.weight' not found in"), std::string::npos);
  }
  // MXFP4 expert.
  Mxfp4Matrix m = ck->mxfp4(L1 + "block_sparse_moe.experts.3.w2");
  EXPECT_EQ(m.rows, 32);
  EXPECT_EQ(m.cols, 32);
  EXPECT_EQ(m.packed, ck->get(L1 + "block_sparse_moe.experts.3.w2.weight_packed").data);
  EXPECT_EQ(m.scale, ck->get(L1 + "block_sparse_moe.experts.3.w2.weight_scale").data);
  // Inventory: table + 168 vision tensors, nothing else.
  const auto st = checkpoint_stats(*ck);
  EXPECT_EQ(st.n_vision, 168);
  EXPECT_EQ(st.n_tensors, static_cast<int64_t>(fx.tensors.size()));
  int64_t expected_text = 0;
  for_each_tensor_spec(c, [&](const TensorSpec& s) { expected_text += s.storage == TensorStorage::Mxfp4 ? 2 : 1; });
  EXPECT_EQ(st.n_text, expected_text);
  // 5 globals + 5*6 common + 3 KDA*14 + 2 MLA*8 + 3 dense + 4 MoE*(8 + 4 experts * 6).
  EXPECT_EQ(expected_text, 5 + 30 + 42 + 16 + 3 + 4 * (8 + 24));
  // tensors() ordered by shard then offset; shards hold lexicographic order.
  const auto& all = ck->tensors();
  for (size_t i = 1; i < all.size(); ++i) {
    if (all[i].file == all[i - 1].file) {
      EXPECT_LT(all[i - 1].name, all[i].name);
    }
  }
}

TEST(Checkpoint, SingleFileWithoutPrefixAndUnpaddedALog) {
  TempDir d;
  FxCheckpoint fx;
  fx.config = k3test::tiny_config_json()["text_config"];  // flat config
  const ModelConfig c = parse_config(fx.config.dump(), "flat");
  fx.tensors = k3test::text_inventory(c, "", 0);
  fx.n_shards = 0;
  fx.write(d.path());
  auto ck = Checkpoint::open(d.path());
  EXPECT_EQ(ck->shard_count(), 1);
  EXPECT_EQ(ck->get("lm_head.weight").name, "lm_head.weight");
  EXPECT_EQ(ck->get("model.layers.1.self_attn.A_log").shape, (std::vector<int64_t>{2}));
}

TEST(Checkpoint, DenseBf16ExpertAccepted) {
  FxCheckpoint fx = k3test::tiny_checkpoint();
  std::vector<k3test::FxTensor> t;
  for (auto& x : fx.tensors)
    if (x.name.find("layers.2.block_sparse_moe.experts.0.w1.") == std::string::npos) t.push_back(x);
  t.push_back({P + "model.layers.2.block_sparse_moe.experts.0.w1.weight", DType::BF16, {32, 32}, {}});
  fx.tensors = t;
  EXPECT_EQ(open_error(fx), "(no error)");
}

TEST(Checkpoint, IndexPointsToMissingFile) {
  FxCheckpoint fx = k3test::tiny_checkpoint();
  fx.edit_index = [](nlohmann::json& j) {
    j["weight_map"]["language_model.model.norm.weight"] = "model-00009-of-000009.safetensors";
  };
  EXPECT_OPEN_ERR(
      fx,
      "shard 'model-00009-of-000009.safetensors' (holding e.g. tensor 'language_model.model.norm.weight') does not exist");
}

TEST(Checkpoint, IndexTensorMissingInShard) {
  FxCheckpoint fx = k3test::tiny_checkpoint();
  fx.edit_index = [](nlohmann::json& j) {
    j["weight_map"]["language_model.model.ghost.weight"] = "model-00001-of-000003.safetensors";
  };
  EXPECT_OPEN_ERR(
      fx,
      "index maps tensor 'language_model.model.ghost.weight' to model-00001-of-000003.safetensors, but that shard has no such tensor");
}

TEST(Checkpoint, ShardTensorMissingFromIndex) {
  FxCheckpoint fx = k3test::tiny_checkpoint();
  fx.edit_index = [](nlohmann::json& j) { j["weight_map"].erase("language_model.model.norm.weight"); };
  EXPECT_OPEN_ERR(fx,
                  "tensor 'language_model.model.norm.weight' is in the shard but not in model.safetensors.index.json");
}

TEST(Checkpoint, IndexMapsTensorToOtherShard) {
  FxCheckpoint fx = k3test::tiny_checkpoint();
  fx.edit_index = [](nlohmann::json& j) {
    j["weight_map"]["language_model.model.norm.weight"] = "model-00001-of-000003.safetensors";
  };
  EXPECT_OPEN_ERR(
      fx,
      "tensor 'language_model.model.norm.weight' is in this shard but the index maps it to model-00001-of-000003.safetensors");
}

TEST(Checkpoint, SameTensorInTwoShards) {
  FxCheckpoint fx = k3test::tiny_checkpoint();
  fx.tensors.push_back(fx_find(fx.tensors, P + "model.norm.weight"));
  int n = 0;
  fx.shard_of = [&n](const std::string& name) {
    if (name == "language_model.model.norm.weight") return n++;
    return is_vision_tensor_name(name) ? 2 : 0;
  };
  EXPECT_OPEN_ERR(
      fx,
      "tensor 'language_model.model.norm.weight' appears in two shards: model-00001-of-000003.safetensors and model-00002-of-000003.safetensors");
}

TEST(Checkpoint, WrongShape) {
  FxCheckpoint fx = k3test::tiny_checkpoint();
  fx_find(fx.tensors, P + L1 + "self_attn.q_proj.weight").shape = {33, 64};
  EXPECT_OPEN_ERR(fx,
                  "tensor 'language_model.model.layers.1.self_attn.q_proj.weight': shape [33, 64], expected [32, 64]");
}

TEST(Checkpoint, WrongDtype) {
  FxCheckpoint fx = k3test::tiny_checkpoint();
  fx_find(fx.tensors, P + L1 + "self_attn.dt_bias").dtype = DType::BF16;
  EXPECT_OPEN_ERR(fx, "tensor 'language_model.model.layers.1.self_attn.dt_bias': dtype BF16, expected F32");
}

TEST(Checkpoint, ALogBadPadding) {
  FxCheckpoint fx = k3test::tiny_checkpoint();
  auto& a = fx_find(fx.tensors, P + L1 + "self_attn.A_log");
  float bad = 0.125f;
  std::memcpy(a.data.data() + 3 * 4, &bad, 4);
  EXPECT_OPEN_ERR(fx, "A_log padding entries must be zero; found 0.125000 at index 3");
}

TEST(Checkpoint, ALogTooShort) {
  FxCheckpoint fx = k3test::tiny_checkpoint();
  auto& a = fx_find(fx.tensors, P + L1 + "self_attn.A_log");
  a.shape = {1};
  a.data.resize(4);
  EXPECT_OPEN_ERR(fx, "A_log': shape [1], expected [2] (or zero-padded along dim 0)");
}

TEST(Checkpoint, StrayWeightPacked) {
  FxCheckpoint fx = k3test::tiny_checkpoint();
  fx.tensors.push_back({P + L1 + "block_sparse_moe.gate.weight_packed", DType::U8, {4, 32}, {}});
  EXPECT_OPEN_ERR(fx,
                  "tensor 'language_model.model.layers.1.block_sparse_moe.gate.weight_packed': stray weight_packed");
}

TEST(Checkpoint, MissingTensor) {
  FxCheckpoint fx = k3test::tiny_checkpoint();
  std::erase_if(fx.tensors,
                [](const auto& t) { return t.name == "language_model.model.layers.2.self_attn.kv_b_proj.weight"; });
  EXPECT_OPEN_ERR(fx,
                  "missing tensor 'language_model.model.layers.2.self_attn.kv_b_proj.weight' (expected BF16 [64, 16])");
}

TEST(Checkpoint, MissingExpertScale) {
  FxCheckpoint fx = k3test::tiny_checkpoint();
  std::erase_if(fx.tensors, [](const auto& t) {
    return t.name == "language_model.model.layers.4.block_sparse_moe.experts.2.w3.weight_scale";
  });
  EXPECT_OPEN_ERR(
      fx,
      "missing tensor 'language_model.model.layers.4.block_sparse_moe.experts.2.w3.weight_scale' (expected U8 [32, 1]");
}

TEST(Checkpoint, WrongExpertPackedShape) {
  FxCheckpoint fx = k3test::tiny_checkpoint();
  fx_find(fx.tensors, P + L1 + "block_sparse_moe.experts.0.w2.weight_packed").shape = {32, 32};
  EXPECT_OPEN_ERR(fx, "experts.0.w2.weight_packed': shape [32, 32], expected [32, 16] (MXFP4 of logical [32, 32])");
}

TEST(Checkpoint, UnexpectedExtraTextTensor) {
  FxCheckpoint fx = k3test::tiny_checkpoint();
  fx.tensors.push_back({P + "model.layers.5.input_layernorm.weight", DType::BF16, {64}, {}});
  EXPECT_OPEN_ERR(fx, "tensor 'language_model.model.layers.5.input_layernorm.weight': unexpected tensor");
}

TEST(Checkpoint, TensorOutsideTextAndVision) {
  FxCheckpoint fx = k3test::tiny_checkpoint();
  fx.tensors.push_back({"audio_tower.w", DType::BF16, {4}, {}});
  EXPECT_OPEN_ERR(fx, "tensor 'audio_tower.w' is neither a text tensor (language_model.*) nor a vision tensor");
}

TEST(Checkpoint, MissingConfigAndShards) {
  TempDir d;
  try {
    Checkpoint::open(d.path());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no config.json"), std::string::npos);
  }
  std::ofstream(d.path() / "config.json") << k3test::tiny_config_json().dump();
  try {
    Checkpoint::open(d.path());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("neither model.safetensors.index.json nor model.safetensors"),
              std::string::npos);
  }
  EXPECT_THROW(Checkpoint::open("/nonexistent/k3dir"), Error);
}

TEST(Checkpoint, IndexFileNameOutsideDir) {
  FxCheckpoint fx = k3test::tiny_checkpoint();
  fx.edit_index = [](nlohmann::json& j) { j["weight_map"]["language_model.model.norm.weight"] = "../x.safetensors"; };
  EXPECT_OPEN_ERR(fx, "is not a plain file name inside the checkpoint directory");
}

TEST(Checkpoint, BadConfigKeyNamesFile) {
  FxCheckpoint fx = k3test::tiny_checkpoint();
  fx.config["text_config"].erase("vocab_size");
  EXPECT_OPEN_ERR(fx, "config.json: missing required key 'text_config.vocab_size'");
}

TEST(Checkpoint, ProgressIsReportedPerShardHeader) {
  k3test::TempDir d;
  k3test::tiny_checkpoint().write(d.path());
  std::vector<std::pair<int64_t, int64_t>> calls;
  k3::CheckpointOptions o;
  o.progress = [&](std::string_view what, int64_t done, int64_t total) {
    EXPECT_EQ(what, "shard headers");
    calls.emplace_back(done, total);
  };
  const auto ck = k3::Checkpoint::open(d.path(), o);
  const std::vector<std::pair<int64_t, int64_t>> want{{0, 3}, {1, 3}, {2, 3}, {3, 3}};
  EXPECT_EQ(calls, want);
  EXPECT_EQ(ck->shard_count(), 3);
}
