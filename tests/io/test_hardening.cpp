// Hardening of k3_io: config keys the engine does not honour are refused unless they hold K3's
// value, config token ids are checked (item 10); the state figures of `k3 info -c` are
// overflow-checked (item 7); the --check tensor scan finds NaN/Inf and impossible MXFP4 scales
// (item 3).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "checkpoint_writer.h"
#include "core/bf16.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "io/model_summary.h"
#include "io/tensor_check.h"

using namespace k3;
using nlohmann::json;

namespace {

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

json quant_block() {
  return {{"quant_method", "compressed-tensors"},
          {"format", "mxfp4-pack-quantized"},
          {"config_groups",
           {{"group_0",
             {{"format", "mxfp4-pack-quantized"},
              {"weights", {{"num_bits", 4}, {"type", "float"}, {"group_size", 32}}}}}}}};
}

}  // namespace

TEST(ConfigHardening, UnhonouredKeysOnlyWithK3Values) {
  json j = k3test::tiny_config_json();
  j["text_config"]["topk_method"] = "noaux_tc";
  j["text_config"]["quantization_config"] = quant_block();
  EXPECT_EQ(error_of(j), "(no error)");
  EXPECT_EQ(parse_config(j.dump(), "cfg.json").quant_group_size, 32);

  json t = j;
  t["text_config"]["topk_method"] = "group_limited_greedy";
  EXPECT_CFG_ERR(t, "cfg.json: key 'text_config.topk_method': \"group_limited_greedy\" is not supported");
  t = j;
  t["text_config"]["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] = 16;
  EXPECT_CFG_ERR(t,
                 "key 'text_config.quantization_config.config_groups.group_0.weights.group_size': 16 is not supported");
  t = j;
  t["text_config"]["quantization_config"]["format"] = "nvfp4-pack-quantized";
  EXPECT_CFG_ERR(t, "key 'text_config.quantization_config.format': \"nvfp4-pack-quantized\" is not supported");
  t = j;
  t["text_config"]["quantization_config"]["config_groups"]["group_0"]["format"] = "int-quantized";
  EXPECT_CFG_ERR(t, "config_groups.group_0.format': \"int-quantized\" is not supported");
  t = j;
  t["text_config"]["quantization_config"]["quant_method"] = "gptq";
  EXPECT_CFG_ERR(t, "quantization_config.quant_method': \"gptq\" is not supported");
  t = j;
  t["text_config"]["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 8;
  EXPECT_CFG_ERR(t, "weights.num_bits': 8 is not supported");
}

TEST(ConfigHardening, TokenIdsAndPositions) {
  json j = k3test::tiny_config_json();
  const int vocab = j["text_config"]["vocab_size"].get<int>();
  json t = j;
  t["bos_token_id"] = vocab;
  EXPECT_CFG_ERR(t, "cfg.json: key 'bos_token_id': token id " + std::to_string(vocab) +
                        " outside the vocabulary [0, vocab_size=" + std::to_string(vocab) + ")");
  t = j;
  t["eos_token_id"] = -1;
  EXPECT_CFG_ERR(t, "key 'eos_token_id': token id -1 outside the vocabulary");
  t = j;
  t.erase("eos_token_id");
  t["text_config"]["eos_token_id"] = -1;
  EXPECT_CFG_ERR(t, "key 'text_config.eos_token_id': token id -1 outside the vocabulary");
  t = j;
  t["text_config"]["max_position_embeddings"] = 0;
  EXPECT_CFG_ERR(t, "key 'text_config.max_position_embeddings': expected a positive integer, found 0");

  // against the tokenizer (its id count may be below the padded vocab_size)
  const ModelConfig c = parse_config(j.dump(), "cfg.json");
  if (c.eos_token_id >= 0) {
    try {
      check_config_token_ids(c, c.eos_token_id, "dir/config.json");
      FAIL() << "eos_token_id beyond the tokenizer accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("dir/config.json: key 'eos_token_id': token id"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_NO_THROW(check_config_token_ids(c, c.vocab_size, "dir/config.json"));
}

TEST(StateBytesHardening, OverflowIsAnErrorNotAWrap) {
  StateBytes sb;
  sb.kda_total = 1000;
  sb.mla_per_token = 55296;  // K3: 24 MLA layers x 576 floats x 4 bytes
  EXPECT_EQ(sb.total(1 << 20), 1000u + 55296ull * 1048576);
  // -c 1e15: 5.5e19 bytes, beyond 2^64 (a wrapping 64-bit product would give 1.84e19)
  try {
    sb.total(1000000000000000LL);
    FAIL() << "no overflow error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "-c/--ctx: the MLA cache for 1000000000000000 tokens (55296 bytes per token) exceeds 2^64 bytes"),
              std::string::npos)
        << e.what();
  }
  sb.mla_per_token = 1;
  sb.kda_total = std::numeric_limits<uint64_t>::max();
  EXPECT_THROW(sb.total(1), Error);
  EXPECT_THROW(sb.total(-1), Error);
}

TEST(TensorCheck, FindsNonFiniteAndImpossibleScales) {
  auto view = [](const char* name, DType dt, std::vector<int64_t> shape, const void* data, uint64_t nbytes) {
    TensorView v;
    v.name = name;
    v.dtype = dt;
    v.shape = std::move(shape);
    v.data = static_cast<const uint8_t*>(data);
    v.nbytes = nbytes;
    return v;
  };
  std::vector<float> f(12, 1.0f);
  TensorView tf = view("x.weight", DType::F32, {3, 4}, f.data(), 48);
  EXPECT_TRUE(scan_tensor(tf).ok());
  EXPECT_TRUE(scan_tensor(tf).scanned);
  f[6] = std::numeric_limits<float>::infinity();
  f[9] = std::nanf("");
  TensorScan r = scan_tensor(tf);
  EXPECT_EQ(r.n_inf, 1u);
  EXPECT_EQ(r.n_nan, 1u);
  EXPECT_EQ(r.first_bad, 6);
  EXPECT_EQ(r.describe(tf), "1 NaN, 1 Inf, first at element 6 (index [1, 2])");

  std::vector<uint16_t> b(8, f32_to_bf16(0.5f));
  TensorView tb = view("lm_head.weight", DType::BF16, {2, 4}, b.data(), 16);
  EXPECT_TRUE(scan_tensor(tb).ok());
  b[5] = 0x7fc0;  // bf16 NaN
  b[7] = 0xff80;  // bf16 -Inf
  r = scan_tensor(tb);
  EXPECT_EQ(r.n_nan, 1u);
  EXPECT_EQ(r.n_inf, 1u);
  EXPECT_EQ(r.first_bad, 5);

  std::vector<uint8_t> s(8, 127);
  TensorView ts = view("experts.0.w1.weight_scale", DType::U8, {2, 4}, s.data(), 8);
  EXPECT_TRUE(scan_tensor(ts).ok());
  s[kMaxPlausibleE8M0 > 0 ? 1 : 0] = kMaxPlausibleE8M0;  // the largest accepted scale
  EXPECT_TRUE(scan_tensor(ts).ok());
  s[2] = 0xFE;  // 2^127: huge but finite
  s[3] = 0xFF;  // NaN
  r = scan_tensor(ts);
  EXPECT_EQ(r.n_huge_scale, 1u);
  EXPECT_EQ(r.n_nan, 1u);
  EXPECT_EQ(r.first_bad, 2);
  // packed E2M1 bytes and other integers: every byte pattern is a value
  std::vector<uint8_t> packed(8, 0xFF);
  TensorView tp = view("experts.0.w1.weight_packed", DType::U8, {2, 4}, packed.data(), 8);
  EXPECT_TRUE(scan_tensor(tp).ok());
  EXPECT_FALSE(scan_tensor(tp).scanned);
}

// `k3 info` opens checkpoints header-only (pread, nothing mapped): same inventory, null data,
// and the checks that read data (A_log zero padding) still run.
TEST(CheckpointHardening, HeaderOnlyOpenMapsNothing) {
  k3test::TempDir d;
  k3test::FxCheckpoint fx = k3test::tiny_checkpoint();
  fx.write(d.path());
  CheckpointOptions header_only;
  header_only.map_data = false;
  auto mapped = Checkpoint::open(d.path());
  auto bare = Checkpoint::open(d.path(), header_only);
  ASSERT_EQ(mapped->tensors().size(), bare->tensors().size());
  for (size_t i = 0; i < bare->tensors().size(); ++i) {
    const TensorView& a = mapped->tensors()[i];
    const TensorView& b = bare->tensors()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_EQ(a.nbytes, b.nbytes);
    EXPECT_EQ(b.data, nullptr) << b.name;
  }
  // a bad A_log padding entry is found without the mapping too
  k3test::TempDir d2;
  auto& a = k3test::fx_find(fx.tensors, "language_model.model.layers.1.self_attn.A_log");
  const float bad = 0.125f;
  std::memcpy(a.data.data() + 3 * 4, &bad, 4);
  fx.write(d2.path());
  try {
    Checkpoint::open(d2.path(), header_only);
    FAIL() << "bad padding accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("A_log padding entries must be zero; found 0.125000 at index 3"),
              std::string::npos)
        << e.what();
  }
}

TEST(SafetensorsHardening, HeaderReadWithPreadMatchesWholeFileParse) {
  k3test::TempDir d;
  k3test::FxTensor t;
  t.name = "a";
  t.dtype = DType::F32;
  t.shape = {2, 3};
  t.data.assign(24, 0);
  k3test::write_safetensors(d.path() / "x.safetensors", {t});
  uint64_t size = 0;
  const SafetensorsHeader h = read_safetensors_header(d.path() / "x.safetensors", &size);
  ASSERT_EQ(h.entries.size(), 1u);
  EXPECT_EQ(h.entries[0].nbytes, 24u);
  EXPECT_EQ(size, h.data_start + 24);
  // a truncated data region is still caught from the header and the file size alone
  std::filesystem::resize_file(d.path() / "x.safetensors", size - 1);
  try {
    read_safetensors_header(d.path() / "x.safetensors");
    FAIL() << "truncated file accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the data region"), std::string::npos) << e.what();
  }
}

// Shard names from the index stay inside the checkpoint directory (finding F17), and a shard
// shorter than its header says is refused naming it and both sizes (finding F14).
TEST(CheckpointHardening, IndexEntriesOutsideTheDirectoryAndTruncatedShardsAreRefused) {
  for (const std::string bad : {"/etc/passwd", "..", ".", "sub/model.safetensors", "../x.safetensors", ""}) {
    k3test::TempDir d;
    k3test::FxCheckpoint fx = k3test::tiny_checkpoint();
    fx.edit_index = [&](json& j) { j["weight_map"]["language_model.model.norm.weight"] = bad; };
    fx.write(d.path());
    try {
      Checkpoint::open(d.path());
      ADD_FAILURE() << "index entry \"" << bad << "\" accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("weight_map[\"language_model.model.norm.weight\"] = \"" + bad +
                                           "\" is not a plain file name inside the checkpoint directory"),
                std::string::npos)
          << e.what();
    }
  }
  k3test::TempDir d;
  k3test::tiny_checkpoint().write(d.path());
  std::vector<std::filesystem::path> shards;
  for (const auto& e : std::filesystem::directory_iterator(d.path()))
    if (e.path().extension() == ".safetensors") shards.push_back(e.path());
  std::sort(shards.begin(), shards.end());
  ASSERT_FALSE(shards.empty());
  const uint64_t size = std::filesystem::file_size(shards[0]);
  std::filesystem::resize_file(shards[0], size - 10);
  try {
    Checkpoint::open(d.path());
    FAIL() << "truncated shard accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind(shards[0].string() + ": ", 0), 0u) << m;
    EXPECT_NE(m.find("file truncated? the file has " + std::to_string(size - 10) + " bytes, this tensor needs "),
              std::string::npos)
        << m;
  }
}
