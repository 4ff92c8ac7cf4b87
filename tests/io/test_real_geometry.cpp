// The real K3 geometry without 1.56 TB: the reconstructed config (tests/io/data/k3_config.json)
// and the full published inventory (spec §2: 497,220 tensors in 96 shards, lexicographic order
// inside shards) written as sparse files whose data regions are never written (ftruncate).
// Set K3_REAL_GEOMETRY_DIR=<dir> to keep the checkpoint there (e.g. for `k3 info`).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sys/stat.h>

#include "checkpoint_writer.h"
#include "io/checkpoint.h"
#include "io/memory_plan.h"
#include "io/model_summary.h"
#include "io/tensor_table.h"

using namespace k3;

namespace {

const std::string kRealConfig = std::string(K3_SOURCE_DIR) + "/tests/io/data/k3_config.json";

// Published layout (spec §2.7): layer N in shard N+1, text globals in 00094, mm_projector in
// 00095, vision_tower in 00096.
int real_shard_of(const std::string& name) {
  if (name.rfind("vision_tower.", 0) == 0) return 95;
  if (name.rfind("mm_projector.", 0) == 0) return 94;
  const auto p = name.find("model.layers.");
  if (p != std::string::npos) return std::stoi(name.substr(p + 13));
  return 93;
}

}  // namespace

TEST(RealGeometry, FullK3InventoryInSparseShards) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<k3test::TempDir> tmp;
  std::filesystem::path dir;
  if (const char* keep = std::getenv("K3_REAL_GEOMETRY_DIR")) {
    dir = keep;
  } else {
    tmp = std::make_unique<k3test::TempDir>();
    dir = tmp->path();
  }
  const ModelConfig cfg0 = load_config(kRealConfig);
  k3test::FxCheckpoint fx;
  fx.config = nlohmann::json::parse(std::ifstream(kRealConfig));
  fx.tensors = k3test::text_inventory(cfg0, "language_model.", 128);  // A_log F32 [128], zero-padded
  for (auto& v : k3test::vision_inventory(false)) fx.tensors.push_back(std::move(v));
  ASSERT_EQ(fx.tensors.size(), 497220u);
  fx.n_shards = 96;
  fx.sparse = true;
  fx.shard_of = real_shard_of;
  fx.write(dir);
  fx.tensors.clear();
  const auto t1 = std::chrono::steady_clock::now();

  auto ck = Checkpoint::open(dir);
  const auto t2 = std::chrono::steady_clock::now();
  const ModelConfig& c = ck->config();
  EXPECT_EQ(c.num_hidden_layers, 93);
  EXPECT_EQ(c.n_kda_layers(), 69);
  EXPECT_EQ(c.n_mla_layers(), 24);
  std::vector<int> mla;
  for (int i = 3; i <= 91; i += 4) mla.push_back(i);
  mla.push_back(92);
  EXPECT_EQ(c.mla_layer_indices(), mla);
  EXPECT_EQ(c.plan[0].ffn, FfnKind::Dense);
  EXPECT_EQ(c.n_moe_layers(), 92);
  EXPECT_EQ(c.num_experts, 896);
  EXPECT_EQ(c.num_experts_per_token, 16);

  const CheckpointStats st = checkpoint_stats(*ck);
  EXPECT_EQ(st.shard_count, 96);
  EXPECT_EQ(st.n_tensors, 497220);
  EXPECT_EQ(st.n_vision, 168);
  ASSERT_TRUE(c.vision.has_value());  // so open() validated all 168 vision tensors (vision.md §2)
  EXPECT_EQ(vision_tensors(c).size(), 168u);
  EXPECT_EQ(st.n_text, 494592 + 2460);
  // Byte budget [AUDIT] (spec §2.7): non-expert trunk 113,509,540,864 B; one expert
  // 17,547,264 B x 896 x 92 = 1,446,456,066,048 B.
  EXPECT_EQ(st.text_bytes, 113509540864ull + 1446456066048ull);
  EXPECT_EQ(st.text_bytes_by_dtype.at(DType::U8), 1446456066048ull);
  // F32: 69 x (3 conv 12288x1x4 + dt_bias 12288 + A_log 128 + o_norm 128) + 92 x 896 bias, x 4 B.
  EXPECT_EQ(st.text_bytes_by_dtype.at(DType::F32), (69ull * (3 * 49152 + 12288 + 128 + 128) + 92ull * 896) * 4);
  EXPECT_EQ(st.text_tensors_by_dtype.at(DType::U8), 494592);

  // Parameters (hand-computed, see algorithms.md §8):
  //   KDA layer 443,740,384 x 69; MLA layer 232,196,096 x 24; dense 3 x 33792 x 7168;
  //   MoE fixed 189,927,808 x 92; expert 3 x 3072 x 3584 = 33,030,144 (x 896 x 92 total, x 16 x 92
  //   active); embedding = lm_head = 163840 x 7168; norms + AttnRes 93 x 6 x 7168 + 3 x 7168.
  const ParamCounts p = count_params(c);
  EXPECT_EQ(p.embedding, 1174405120);
  EXPECT_EQ(p.lm_head, 1174405120);
  EXPECT_EQ(p.attention_kda, 69ll * 443740384);
  EXPECT_EQ(p.attention_mla, 24ll * 232196096);
  EXPECT_EQ(p.dense_mlp, 726663168);
  EXPECT_EQ(p.moe_router + p.moe_latent + p.moe_shared, 92ll * 189927808);
  EXPECT_EQ(p.routed_experts, 2722740830208ll);
  EXPECT_EQ(p.routed_active, 48620371968ll);
  EXPECT_EQ(p.norms_attn_res, 4021248);
  EXPECT_EQ(p.total, 2779484476000ll);  // spec: 2.78 T (2.779 T)
  EXPECT_EQ(p.active, 104189612640ll);  // spec: ~104.2 B
  EXPECT_NEAR(static_cast<double>(p.total) / 1e12, 2.78, 0.005);
  EXPECT_NEAR(static_cast<double>(p.active) / 1e9, 104.2, 0.05);

  // Per-sequence state (fp32): KDA 96 x 128 x 128 x 4 = 6,291,456 B + conv 3 x 3 x 12288 x 4 =
  // 442,368 B per layer, x 69; MLA (512 + 64) x 4 = 2304 B per token per layer, x 24 = 55,296.
  const StateBytes sb = state_bytes(c);
  EXPECT_EQ(sb.kda_recurrent_per_layer, 6291456u);
  EXPECT_EQ(sb.kda_conv_per_layer, 442368u);
  EXPECT_EQ(sb.kda_total, 464633856u);
  EXPECT_EQ(sb.mla_per_token, 55296u);
  EXPECT_EQ(sb.total(1 << 20), 464633856ull + 55296ull * 1048576);

  // Spot checks through the API.
  EXPECT_EQ(ck->get("model.layers.92.self_attn.kv_b_proj.weight").shape, (std::vector<int64_t>{24576, 512}));
  EXPECT_EQ(ck->get("model.layers.5.self_attn.A_log").shape, (std::vector<int64_t>{128}));
  Mxfp4Matrix m = ck->mxfp4("model.layers.47.block_sparse_moe.experts.895.w2");
  EXPECT_EQ(m.rows, 3584);
  EXPECT_EQ(m.cols, 3072);
  EXPECT_EQ(ck->get("lm_head.weight").file, "model-00094-of-000096.safetensors");

  // Little real disk: headers + index only (data regions are holes).
  if (!tmp) return;
  uint64_t allocated = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    struct stat s {};
    ::stat(e.path().c_str(), &s);
    allocated += static_cast<uint64_t>(s.st_blocks) * 512;
  }
  EXPECT_LT(allocated, 200ull << 20);
  const auto ms = [](auto a, auto b) { return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count(); };
  std::printf("real geometry: write %lld ms, open+validate %lld ms, %.1f MB on disk\n",
              static_cast<long long>(ms(t0, t1)), static_cast<long long>(ms(t1, t2)), allocated / 1e6);
}

// `k3 info models/k3-config` (config + tokenizer, no weights) reports the published layout from
// the tensor table: the same figures as the full sparse inventory above, but for A_log, which the
// table counts unpadded (96 of the 128 stored F32 entries: 69 x 32 x 4 = 8,832 bytes fewer).
TEST(RealGeometry, PublishedInventoryFromConfigAlone) {
  for (const std::string path : {kRealConfig, std::string(K3_SOURCE_DIR) + "/models/k3-config/config.json"}) {
    SCOPED_TRACE(path);
    const ModelConfig c = load_config(path);
    const CheckpointStats st = published_text_stats(c);
    EXPECT_EQ(st.shard_count, 0);
    EXPECT_EQ(st.n_text, 494592 + 2460);
    EXPECT_EQ(st.n_vision, 0);
    EXPECT_EQ(st.text_bytes, 113509540864ull + 1446456066048ull - 8832);
    EXPECT_EQ(st.text_bytes_by_dtype.at(DType::U8), 1446456066048ull);
    EXPECT_EQ(st.text_tensors_by_dtype.at(DType::U8), 494592);
    const WeightBytes w = weight_bytes(c);
    EXPECT_EQ(w.experts, 1446456066048ull);
    EXPECT_EQ(w.embedding, 163840ull * 7168 * 2);
    EXPECT_EQ(w.embedding + w.bf16 + w.f32, 113509540864ull - 8832);
  }
}
