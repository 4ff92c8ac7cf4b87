#include "io/tensor_table.h"

#include <cctype>

#include "core/error.h"

namespace k3 {

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

const std::vector<DType> kBF16 = {DType::BF16};
const std::vector<DType> kF32 = {DType::F32};

std::string layer_prefix(int il) { return "model.layers." + std::to_string(il) + "."; }

TensorSpec plain(std::string name, std::vector<int64_t> shape, const std::vector<DType>& dt, TensorGroup g,
                 int il) {
  TensorSpec s;
  s.name = std::move(name);
  s.shape = std::move(shape);
  s.dtypes = dt;
  s.group = g;
  s.il = il;
  return s;
}

}  // namespace

std::vector<TensorSpec> global_tensors(const ModelConfig& c) {
  const int64_t D = c.hidden_size, V = c.vocab_size;
  std::vector<TensorSpec> r;
  r.push_back(plain("model.embed_tokens.weight", {V, D}, kBF16, TensorGroup::Global, -1));
  if (!c.tie_word_embeddings) r.push_back(plain("lm_head.weight", {V, D}, kBF16, TensorGroup::Global, -1));
  r.push_back(plain("model.norm.weight", {D}, kBF16, TensorGroup::Global, -1));
  r.push_back(plain("model.output_attn_res_norm.weight", {D}, kBF16, TensorGroup::Global, -1));
  r.push_back(plain("model.output_attn_res_proj.weight", {1, D}, kBF16, TensorGroup::Global, -1));
  return r;
}

std::vector<TensorSpec> common_layer_tensors(const ModelConfig& c, int il) {
  const int64_t D = c.hidden_size;
  const std::string p = layer_prefix(il);
  const auto g = TensorGroup::Common;
  return {plain(p + "input_layernorm.weight", {D}, kBF16, g, il),
          plain(p + "post_attention_layernorm.weight", {D}, kBF16, g, il),
          plain(p + "self_attention_res_norm.weight", {D}, kBF16, g, il),
          plain(p + "self_attention_res_proj.weight", {1, D}, kBF16, g, il),
          plain(p + "mlp_res_norm.weight", {D}, kBF16, g, il),
          plain(p + "mlp_res_proj.weight", {1, D}, kBF16, g, il)};
}

std::vector<TensorSpec> kda_tensors(const ModelConfig& c, int il) {
  const int64_t D = c.hidden_size, H = c.kda_num_heads, dh = c.kda_head_dim, C = H * dh,
                K = c.short_conv_kernel_size;
  const std::string p = layer_prefix(il) + "self_attn.";
  const auto g = TensorGroup::KDA;
  std::vector<TensorSpec> r = {
      plain(p + "q_proj.weight", {C, D}, kBF16, g, il),
      plain(p + "k_proj.weight", {C, D}, kBF16, g, il),
      plain(p + "v_proj.weight", {C, D}, kBF16, g, il),
      plain(p + "q_conv1d.weight", {C, 1, K}, kF32, g, il),
      plain(p + "k_conv1d.weight", {C, 1, K}, kF32, g, il),
      plain(p + "v_conv1d.weight", {C, 1, K}, kF32, g, il),
      plain(p + "f_a_proj.weight", {dh, D}, kBF16, g, il),
      plain(p + "f_b_proj.weight", {C, dh}, kBF16, g, il),
      plain(p + "b_proj.weight", {H, D}, kBF16, g, il),
      plain(p + "g_proj.weight", {C, D}, kBF16, g, il),
      plain(p + "dt_bias", {C}, kF32, g, il),
      plain(p + "A_log", {H}, kF32, g, il),
      plain(p + "o_norm.weight", {dh}, kF32, g, il),
      plain(p + "o_proj.weight", {D, C}, kBF16, g, il),
  };
  for (auto& s : r)
    if (s.name == p + "A_log") s.zero_padded = true;
  return r;
}

std::vector<TensorSpec> mla_tensors(const ModelConfig& c, int il) {
  const int64_t D = c.hidden_size, nh = c.num_attention_heads, qr = c.q_lora_rank, kvr = c.kv_lora_rank,
                nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim, vd = c.v_head_dim;
  const std::string p = layer_prefix(il) + "self_attn.";
  const auto g = TensorGroup::MLA;
  std::vector<TensorSpec> r = {
      plain(p + "q_a_proj.weight", {qr, D}, kBF16, g, il),
      plain(p + "q_a_layernorm.weight", {qr}, kBF16, g, il),
      plain(p + "q_b_proj.weight", {nh * (nope + rope), qr}, kBF16, g, il),
      plain(p + "kv_a_proj_with_mqa.weight", {kvr + rope, D}, kBF16, g, il),
      plain(p + "kv_a_layernorm.weight", {kvr}, kBF16, g, il),
      plain(p + "kv_b_proj.weight", {nh * (nope + vd), kvr}, kBF16, g, il),
  };
  if (c.mla_use_output_gate) r.push_back(plain(p + "g_proj.weight", {nh * vd, D}, kBF16, g, il));
  r.push_back(plain(p + "o_proj.weight", {D, nh * vd}, kBF16, g, il));
  return r;
}

std::vector<TensorSpec> dense_mlp_tensors(const ModelConfig& c, int il) {
  const int64_t D = c.hidden_size, I = c.intermediate_size;
  const std::string p = layer_prefix(il) + "mlp.";
  const auto g = TensorGroup::DenseMLP;
  return {plain(p + "gate_proj.weight", {I, D}, kBF16, g, il), plain(p + "up_proj.weight", {I, D}, kBF16, g, il),
          plain(p + "down_proj.weight", {D, I}, kBF16, g, il)};
}

std::vector<TensorSpec> moe_tensors(const ModelConfig& c, int il) {
  const int64_t D = c.hidden_size, E = c.num_experts, Z = c.routed_expert_hidden_size,
                S = static_cast<int64_t>(c.num_shared_experts) * c.moe_intermediate_size;
  const std::string p = layer_prefix(il) + "block_sparse_moe.";
  const auto g = TensorGroup::MoE;
  std::vector<TensorSpec> r = {
      plain(p + "gate.weight", {E, D}, kBF16, g, il),
      plain(p + "gate.e_score_correction_bias", {E}, kF32, g, il),
      plain(p + "routed_expert_down_proj.weight", {Z, D}, kBF16, g, il),
  };
  if (c.latent_moe_use_norm) r.push_back(plain(p + "routed_expert_norm.weight", {Z}, kBF16, g, il));
  r.push_back(plain(p + "routed_expert_up_proj.weight", {D, Z}, kBF16, g, il));
  if (S > 0) {
    r.push_back(plain(p + "shared_experts.gate_proj.weight", {S, D}, kBF16, g, il));
    r.push_back(plain(p + "shared_experts.up_proj.weight", {S, D}, kBF16, g, il));
    r.push_back(plain(p + "shared_experts.down_proj.weight", {D, S}, kBF16, g, il));
  }
  return r;
}

std::vector<TensorSpec> expert_tensors(const ModelConfig& c, int il, int e) {
  const int64_t Z = c.routed_expert_hidden_size, F = c.moe_intermediate_size;
  const std::string p = layer_prefix(il) + "block_sparse_moe.experts." + std::to_string(e) + ".";
  std::vector<TensorSpec> r = {plain(p + "w1", {F, Z}, kBF16, TensorGroup::Expert, il),
                               plain(p + "w2", {Z, F}, kBF16, TensorGroup::Expert, il),
                               plain(p + "w3", {F, Z}, kBF16, TensorGroup::Expert, il)};
  for (auto& s : r) {
    s.storage = TensorStorage::Mxfp4;
    s.expert = e;
  }
  return r;
}

std::vector<TensorSpec> layer_tensors(const ModelConfig& c, int il) {
  std::vector<TensorSpec> r = common_layer_tensors(c, il);
  const LayerSpec& l = c.plan.at(static_cast<size_t>(il));
  auto add = [&](std::vector<TensorSpec> v) {
    for (auto& s : v) r.push_back(std::move(s));
  };
  add(l.attn == AttnKind::KDA ? kda_tensors(c, il) : mla_tensors(c, il));
  if (l.ffn == FfnKind::Dense) {
    add(dense_mlp_tensors(c, il));
  } else {
    add(moe_tensors(c, il));
    for (int e = 0; e < c.num_experts; ++e) add(expert_tensors(c, il, e));
  }
  return r;
}

void for_each_tensor_spec(const ModelConfig& c, const std::function<void(const TensorSpec&)>& fn) {
  for (const auto& s : global_tensors(c)) fn(s);
  for (int il = 0; il < c.num_hidden_layers; ++il)
    for (const auto& s : layer_tensors(c, il)) fn(s);
}

std::vector<StoredTensor> stored_tensors(const TensorSpec& s) {
  if (s.storage == TensorStorage::Plain) return {{s.name, s.dtypes.front(), s.shape}};
  const int64_t rows = s.shape.at(0), cols = s.shape.at(1);
  if (cols % 32 != 0)
    throw Error("MXFP4 matrix '" + s.name + "': cols " + std::to_string(cols) + " is not a multiple of 32");
  return {{s.name + ".weight_packed", DType::U8, {rows, cols / 2}},
          {s.name + ".weight_scale", DType::U8, {rows, cols / 32}}};
}

bool is_expert_matrix_base(const std::string& b) {
  // model.layers.<digits>.block_sparse_moe.experts.<digits>.w[123]
  auto digits = [&](size_t& i) {
    size_t s = i;
    while (i < b.size() && std::isdigit(static_cast<unsigned char>(b[i]))) ++i;
    return i > s;
  };
  auto lit = [&](size_t& i, const char* t) {
    std::string_view v(t);
    if (b.compare(i, v.size(), v) != 0) return false;
    i += v.size();
    return true;
  };
  size_t i = 0;
  if (!lit(i, "model.layers.") || !digits(i) || !lit(i, ".block_sparse_moe.experts.") || !digits(i) ||
      !lit(i, ".w"))
    return false;
  return i + 1 == b.size() && (b[i] == '1' || b[i] == '2' || b[i] == '3');
}

bool is_vision_tensor_name(const std::string& n) {
  return n.rfind("vision_tower.", 0) == 0 || n.rfind("mm_projector.", 0) == 0;
}

}  // namespace k3
