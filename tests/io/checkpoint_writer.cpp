#include "checkpoint_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>

#include "io/tensor_table.h"

namespace k3test {

TempDir::TempDir() {
  char tmpl[] = "/tmp/k3test-XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}
TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

uint64_t FxTensor::nbytes() const {
  uint64_t n = k3::dtype_size(dtype);
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

namespace {

void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void write_all(int fd, const void* p, size_t n, const fs::path& f) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t w = ::write(fd, c, n);
    if (w <= 0) throw std::runtime_error("write failed: " + f.string());
    c += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

void write_safetensors(const fs::path& file, std::vector<FxTensor> tensors, bool sparse,
                       const nlohmann::json& metadata) {
  std::sort(tensors.begin(), tensors.end(), [](const FxTensor& a, const FxTensor& b) { return a.name < b.name; });
  std::string h = "{";
  if (!metadata.is_null()) h += "\"__metadata__\":" + metadata.dump();
  uint64_t off = 0;
  for (const auto& t : tensors) {
    if (h.size() > 1) h += ",";
    h += "\"" + t.name + "\":{\"dtype\":\"" + std::string(k3::dtype_name(t.dtype)) + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) h += (i ? "," : "") + std::to_string(t.shape[i]);
    const uint64_t n = t.nbytes();
    h += "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + n) + "]}";
    off += n;
  }
  h += "}";
  while (h.size() % 8) h += ' ';  // safetensors pads the header with spaces
  std::string head;
  put_u64(head, h.size());
  head += h;
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + file.string());
  write_all(fd, head.data(), head.size(), file);
  if (sparse) {
    if (::ftruncate(fd, static_cast<off_t>(head.size() + off)) != 0)
      throw std::runtime_error("ftruncate failed: " + file.string());
  } else {
    std::vector<uint8_t> buf;
    for (const auto& t : tensors) {
      const uint64_t n = t.nbytes();
      if (!t.data.empty()) {
        if (t.data.size() != n) throw std::runtime_error("fixture data size mismatch for " + t.name);
        write_all(fd, t.data.data(), n, file);
        continue;
      }
      buf.resize(n);
      uint32_t seed = static_cast<uint32_t>(std::hash<std::string>{}(t.name));
      for (uint64_t i = 0; i < n; ++i) buf[i] = static_cast<uint8_t>((seed + i * 7) % 251);
      write_all(fd, buf.data(), n, file);
    }
  }
  ::close(fd);
}

void write_raw_safetensors(const fs::path& file, const std::string& header, uint64_t data_bytes, int64_t header_len) {
  std::string s;
  put_u64(s, header_len < 0 ? header.size() : static_cast<uint64_t>(header_len));
  s += header;
  s.append(data_bytes, '\0');
  std::ofstream(file, std::ios::binary).write(s.data(), static_cast<std::streamsize>(s.size()));
}

std::vector<FxTensor> text_inventory(const k3::ModelConfig& cfg, const std::string& prefix, int a_log_len) {
  std::vector<FxTensor> r;
  k3::for_each_tensor_spec(cfg, [&](const k3::TensorSpec& s) {
    for (auto& st : k3::stored_tensors(s)) {
      FxTensor t{prefix + st.name, st.dtype, st.shape, {}};
      if (s.zero_padded && a_log_len > 0) t.shape[0] = a_log_len;
      r.push_back(std::move(t));
    }
  });
  for (auto& t : r) {
    if (t.name.size() >= 5 && t.name.compare(t.name.size() - 5, 5, "A_log") == 0) {
      std::vector<float> v(static_cast<size_t>(t.shape[0]), 0.0f);
      for (int h = 0; h < cfg.kda_num_heads && h < static_cast<int>(v.size()); ++h)
        v[static_cast<size_t>(h)] = 0.5f + 0.25f * h;
      t.data.resize(v.size() * 4);
      std::memcpy(t.data.data(), v.data(), t.data.size());
    }
  }
  return r;
}

std::vector<FxTensor> vision_inventory(bool tiny) {
  std::vector<FxTensor> r;
  if (!tiny) {  // K3 as published (vision.md §2), written out independently of the tensor table
    r.push_back({"vision_tower.patch_embed.proj.weight", k3::DType::BF16, {1024, 3, 14, 14}, {}});
    r.push_back({"vision_tower.patch_embed.pos_emb.weight", k3::DType::BF16, {64, 64, 1024}, {}});
    for (int l = 0; l < 27; ++l) {
      const std::string p = "vision_tower.encoder.blocks." + std::to_string(l) + ".";
      r.push_back({p + "norm0.weight", k3::DType::BF16, {1024}, {}});
      r.push_back({p + "wqkv.weight", k3::DType::BF16, {4608, 1024}, {}});
      r.push_back({p + "wo.weight", k3::DType::BF16, {1024, 1536}, {}});
      r.push_back({p + "norm1.weight", k3::DType::BF16, {1024}, {}});
      r.push_back({p + "mlp.fc0.weight", k3::DType::BF16, {4096, 1024}, {}});
      r.push_back({p + "mlp.fc1.weight", k3::DType::BF16, {1024, 4096}, {}});
    }
    r.push_back({"vision_tower.encoder.final_layernorm.weight", k3::DType::BF16, {1024}, {}});
    r.push_back({"mm_projector.proj.0.weight", k3::DType::BF16, {4096, 4096}, {}});
    r.push_back({"mm_projector.proj.2.weight", k3::DType::BF16, {7168, 4096}, {}});
    r.push_back({"mm_projector.post_norm.weight", k3::DType::BF16, {7168}, {}});
    return r;
  }
  const int64_t H = 8, F = 16, P = 2, O = 64;
  r.push_back({"vision_tower.patch_embed.proj.weight", k3::DType::BF16, {H, 3, P, P}, {}});
  r.push_back({"vision_tower.patch_embed.proj.bias", k3::DType::BF16, {H}, {}});
  r.push_back({"vision_tower.final_layernorm.weight", k3::DType::BF16, {H}, {}});
  for (int l = 0; l < 27; ++l) {
    const std::string p = "vision_tower.encoder.blocks." + std::to_string(l) + ".";
    r.push_back({p + "norm0.weight", k3::DType::BF16, {H}, {}});
    r.push_back({p + "wqkv.weight", k3::DType::BF16, {3 * H, H}, {}});
    r.push_back({p + "wqkv.bias", k3::DType::BF16, {3 * H}, {}});
    r.push_back({p + "wo.weight", k3::DType::BF16, {H, H}, {}});
    r.push_back({p + "mlp.fc0.weight", k3::DType::BF16, {F, H}, {}});
    r.push_back({p + "mlp.fc1.weight", k3::DType::BF16, {H, F}, {}});
  }
  r.push_back({"mm_projector.pre_norm.weight", k3::DType::BF16, {4 * H}, {}});
  r.push_back({"mm_projector.proj.0.weight", k3::DType::BF16, {4 * H, 4 * H}, {}});
  r.push_back({"mm_projector.proj.2.weight", k3::DType::BF16, {O, 4 * H}, {}});
  return r;
}

nlohmann::json tiny_config_json() {
  nlohmann::json t = {
      {"architectures", {"KimiLinearForCausalLM"}},
      {"model_type", "kimi_linear"},
      {"hidden_size", 64},
      {"num_hidden_layers", 5},
      {"vocab_size", 256},
      {"num_attention_heads", 2},
      {"num_key_value_heads", 2},
      {"q_lora_rank", 32},
      {"kv_lora_rank", 16},
      {"qk_nope_head_dim", 16},
      {"qk_rope_head_dim", 8},
      {"v_head_dim", 16},
      {"mla_use_nope", true},
      {"mla_use_output_gate", true},
      {"intermediate_size", 96},
      {"first_k_dense_replace", 1},
      {"moe_layer_freq", 1},
      {"num_experts", 4},
      {"num_experts_per_token", 2},
      {"num_shared_experts", 1},
      {"moe_intermediate_size", 32},
      {"routed_expert_hidden_size", 32},
      {"latent_moe_use_norm", true},
      {"moe_router_activation_func", "sigmoid"},
      {"moe_renormalize", true},
      {"routed_scaling_factor", 1.0},
      {"hidden_act", "situ"},
      {"activation_situ_beta", 4.0},
      {"activation_situ_linear_beta", 25.0},
      {"attn_res_block_size", 3},
      {"rms_norm_eps", 1e-5},
      {"tie_word_embeddings", false},
      {"num_nextn_predict_layers", 0},
      {"linear_attn_config",
       {{"kda_layers", {1, 2, 4}},
        {"full_attn_layers", {3, 5}},
        {"num_heads", 2},
        {"head_dim", 16},
        {"short_conv_kernel_size", 4},
        {"gate_lower_bound", -5.0},
        {"use_full_rank_gate", true}}},
  };
  return {{"architectures", {"KimiK3ForConditionalGeneration"}},
          {"model_type", "kimi_k3"},
          {"bos_token_id", 250},
          {"eos_token_id", 251},
          {"pad_token_id", 255},
          {"tie_word_embeddings", false},
          {"text_config", t},
          {"vision_config", {{"hidden_size", 8}}}};
}

std::string shard_name(int i, int n) {
  char b[64];
  std::snprintf(b, sizeof b, "model-%05d-of-%06d.safetensors", i, n);
  return b;
}

void FxCheckpoint::write(const fs::path& dir) const {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config.dump(2);
  if (n_shards == 0) {
    write_safetensors(dir / "model.safetensors", tensors, sparse);
    return;
  }
  auto default_shard = [&](const std::string& name) {
    if (k3::is_vision_tensor_name(name)) return n_shards - 1;
    const auto p = name.find("model.layers.");
    if (p != std::string::npos) return std::stoi(name.substr(p + 13)) % (n_shards - 2);
    return n_shards - 2;
  };
  std::vector<std::vector<FxTensor>> shards(static_cast<size_t>(n_shards));
  nlohmann::json index;
  uint64_t total = 0;
  for (const auto& t : tensors) {
    const int s = shard_of ? shard_of(t.name) : default_shard(t.name);
    shards.at(static_cast<size_t>(s)).push_back(t);
    index["weight_map"][t.name] = shard_name(s + 1, n_shards);
    total += t.nbytes();
  }
  index["metadata"]["total_size"] = total;
  for (int s = 0; s < n_shards; ++s)
    write_safetensors(dir / shard_name(s + 1, n_shards), shards[static_cast<size_t>(s)], sparse);
  if (edit_index) edit_index(index);
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();
}

FxCheckpoint tiny_checkpoint() {
  FxCheckpoint ck;
  ck.config = tiny_config_json();
  const k3::ModelConfig cfg = k3::parse_config(ck.config.dump(), "tiny config.json");
  ck.tensors = text_inventory(cfg, "language_model.", 4);
  for (auto& v : vision_inventory(true)) ck.tensors.push_back(std::move(v));
  return ck;
}

FxTensor& fx_find(std::vector<FxTensor>& t, const std::string& name) {
  for (auto& x : t)
    if (x.name == name) return x;
  throw std::out_of_range("fixture has no tensor " + name);
}

}  // namespace k3test
