#include "io/tensor_table.h"

#include <algorithm>
#include <cctype>
#include <climits>

#include "core/error.h"

namespace k3 {

namespace {

using Shape = std::vector<int64_t>;
const std::vector<DType> kBF16 = {DType::BF16};
const std::vector<DType> kF32 = {DType::F32};

// Dimension symbols (see the TensorRole comment in the header).
int64_t D(const ModelConfig& c) { return c.hidden_size; }
int64_t C(const ModelConfig& c) { return int64_t{c.kda_num_heads} * c.kda_head_dim; }
int64_t S(const ModelConfig& c) { return int64_t{c.num_shared_experts} * c.moe_intermediate_size; }
bool untied(const ModelConfig& c) { return !c.tie_word_embeddings; }
bool output_gate(const ModelConfig& c) { return c.mla_use_output_gate; }
bool latent_norm(const ModelConfig& c) { return c.latent_moe_use_norm; }
bool shared(const ModelConfig& c) { return S(c) > 0; }
bool tower(const ModelConfig& c) { return c.vision.has_value(); }
// Vision symbols (io/vision_config.h); 0 when the config declares no tower (rows then absent).
const VisionConfig& V(const ModelConfig& c) {
  static const VisionConfig none;
  return c.vision ? *c.vision : none;
}

const char* const kL = "model.layers.{il}.";

// The table. Row i describes TensorRole i; rows of one group appear in the published order.
std::vector<TensorKind> make_rows() {
  using St = TensorStorage;
  auto row = [](TensorRole r, const char* id, TensorGroup g, std::string pattern, const std::vector<DType>& dt,
                Shape (*shape)(const ModelConfig&), bool (*present)(const ModelConfig&) = nullptr,
                const char* when = "", St storage = St::Plain, bool padded = false) {
    return TensorKind{r, id, g, std::move(pattern), dt, storage, padded, when, shape, present};
  };
  const std::string L = kL, A = L + "self_attn.", M = L + "block_sparse_moe.", X = M + "experts.{e}.";
  using R = TensorRole;
  using G = TensorGroup;
  std::vector<TensorKind> t;
  // §2.1 globals
  t.push_back(row(R::EmbedTokens, "embed_tokens", G::Global, "model.embed_tokens.weight", kBF16,
                  [](const ModelConfig& c) -> Shape {
                    return {c.vocab_size, D(c)};
                  }));
  t.push_back(row(
      R::LmHead, "lm_head", G::Global, "lm_head.weight", kBF16,
      [](const ModelConfig& c) -> Shape {
        return {c.vocab_size, D(c)};
      },
      untied, "!tie_word_embeddings"));
  t.push_back(row(R::FinalNorm, "norm", G::Global, "model.norm.weight", kBF16,
                  [](const ModelConfig& c) -> Shape { return {D(c)}; }));
  t.push_back(row(R::OutResNorm, "output_attn_res_norm", G::Global, "model.output_attn_res_norm.weight", kBF16,
                  [](const ModelConfig& c) -> Shape { return {D(c)}; }));
  t.push_back(row(R::OutResProj, "output_attn_res_proj", G::Global, "model.output_attn_res_proj.weight", kBF16,
                  [](const ModelConfig& c) -> Shape {
                    return {1, D(c)};
                  }));
  // §2.2 every layer
  auto vecD = [](const ModelConfig& c) -> Shape { return {D(c)}; };
  auto rowD = [](const ModelConfig& c) -> Shape { return {1, D(c)}; };
  t.push_back(row(R::InputNorm, "input_layernorm", G::Common, L + "input_layernorm.weight", kBF16, vecD));
  t.push_back(
      row(R::PostAttnNorm, "post_attention_layernorm", G::Common, L + "post_attention_layernorm.weight", kBF16, vecD));
  t.push_back(
      row(R::AttnResNorm, "self_attention_res_norm", G::Common, L + "self_attention_res_norm.weight", kBF16, vecD));
  t.push_back(
      row(R::AttnResProj, "self_attention_res_proj", G::Common, L + "self_attention_res_proj.weight", kBF16, rowD));
  t.push_back(row(R::MlpResNorm, "mlp_res_norm", G::Common, L + "mlp_res_norm.weight", kBF16, vecD));
  t.push_back(row(R::MlpResProj, "mlp_res_proj", G::Common, L + "mlp_res_proj.weight", kBF16, rowD));
  // §2.3 KDA
  auto CD = [](const ModelConfig& c) -> Shape { return {C(c), D(c)}; };
  auto conv = [](const ModelConfig& c) -> Shape { return {C(c), 1, c.short_conv_kernel_size}; };
  t.push_back(row(R::KdaQProj, "kda.q_proj", G::KDA, A + "q_proj.weight", kBF16, CD));
  t.push_back(row(R::KdaKProj, "kda.k_proj", G::KDA, A + "k_proj.weight", kBF16, CD));
  t.push_back(row(R::KdaVProj, "kda.v_proj", G::KDA, A + "v_proj.weight", kBF16, CD));
  t.push_back(row(R::KdaQConv, "kda.q_conv1d", G::KDA, A + "q_conv1d.weight", kF32, conv));
  t.push_back(row(R::KdaKConv, "kda.k_conv1d", G::KDA, A + "k_conv1d.weight", kF32, conv));
  t.push_back(row(R::KdaVConv, "kda.v_conv1d", G::KDA, A + "v_conv1d.weight", kF32, conv));
  t.push_back(row(R::KdaFA, "kda.f_a_proj", G::KDA, A + "f_a_proj.weight", kBF16, [](const ModelConfig& c) -> Shape {
    return {c.kda_head_dim, D(c)};
  }));
  t.push_back(row(R::KdaFB, "kda.f_b_proj", G::KDA, A + "f_b_proj.weight", kBF16, [](const ModelConfig& c) -> Shape {
    return {C(c), c.kda_head_dim};
  }));
  t.push_back(row(R::KdaBProj, "kda.b_proj", G::KDA, A + "b_proj.weight", kBF16, [](const ModelConfig& c) -> Shape {
    return {c.kda_num_heads, D(c)};
  }));
  t.push_back(row(R::KdaGProj, "kda.g_proj", G::KDA, A + "g_proj.weight", kBF16, CD));
  t.push_back(row(R::KdaDtBias, "kda.dt_bias", G::KDA, A + "dt_bias", kF32,
                  [](const ModelConfig& c) -> Shape { return {C(c)}; }));
  t.push_back(row(
      R::KdaALog, "kda.A_log", G::KDA, A + "A_log", kF32,
      [](const ModelConfig& c) -> Shape { return {c.kda_num_heads}; }, nullptr, "", St::Plain, true));
  t.push_back(row(R::KdaONorm, "kda.o_norm", G::KDA, A + "o_norm.weight", kF32,
                  [](const ModelConfig& c) -> Shape { return {c.kda_head_dim}; }));
  t.push_back(row(R::KdaOProj, "kda.o_proj", G::KDA, A + "o_proj.weight", kBF16, [](const ModelConfig& c) -> Shape {
    return {D(c), C(c)};
  }));
  // §2.4 MLA
  t.push_back(row(R::MlaQA, "mla.q_a_proj", G::MLA, A + "q_a_proj.weight", kBF16, [](const ModelConfig& c) -> Shape {
    return {c.q_lora_rank, D(c)};
  }));
  t.push_back(row(R::MlaQANorm, "mla.q_a_layernorm", G::MLA, A + "q_a_layernorm.weight", kBF16,
                  [](const ModelConfig& c) -> Shape { return {c.q_lora_rank}; }));
  t.push_back(row(R::MlaQB, "mla.q_b_proj", G::MLA, A + "q_b_proj.weight", kBF16, [](const ModelConfig& c) -> Shape {
    return {int64_t{c.num_attention_heads} * (c.qk_nope_head_dim + c.qk_rope_head_dim), c.q_lora_rank};
  }));
  t.push_back(row(R::MlaKvA, "mla.kv_a_proj_with_mqa", G::MLA, A + "kv_a_proj_with_mqa.weight", kBF16,
                  [](const ModelConfig& c) -> Shape {
                    return {int64_t{c.kv_lora_rank} + c.qk_rope_head_dim, D(c)};
                  }));
  t.push_back(row(R::MlaKvANorm, "mla.kv_a_layernorm", G::MLA, A + "kv_a_layernorm.weight", kBF16,
                  [](const ModelConfig& c) -> Shape { return {c.kv_lora_rank}; }));
  t.push_back(row(R::MlaKvB, "mla.kv_b_proj", G::MLA, A + "kv_b_proj.weight", kBF16, [](const ModelConfig& c) -> Shape {
    return {int64_t{c.num_attention_heads} * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank};
  }));
  t.push_back(row(
      R::MlaGProj, "mla.g_proj", G::MLA, A + "g_proj.weight", kBF16,
      [](const ModelConfig& c) -> Shape {
        return {int64_t{c.num_attention_heads} * c.v_head_dim, D(c)};
      },
      output_gate, "mla_use_output_gate"));
  t.push_back(row(R::MlaOProj, "mla.o_proj", G::MLA, A + "o_proj.weight", kBF16, [](const ModelConfig& c) -> Shape {
    return {D(c), int64_t{c.num_attention_heads} * c.v_head_dim};
  }));
  // §2.5 dense MLP
  t.push_back(row(R::MlpGate, "mlp.gate_proj", G::DenseMLP, L + "mlp.gate_proj.weight", kBF16,
                  [](const ModelConfig& c) -> Shape {
                    return {c.intermediate_size, D(c)};
                  }));
  t.push_back(
      row(R::MlpUp, "mlp.up_proj", G::DenseMLP, L + "mlp.up_proj.weight", kBF16, [](const ModelConfig& c) -> Shape {
        return {c.intermediate_size, D(c)};
      }));
  t.push_back(row(R::MlpDown, "mlp.down_proj", G::DenseMLP, L + "mlp.down_proj.weight", kBF16,
                  [](const ModelConfig& c) -> Shape {
                    return {D(c), c.intermediate_size};
                  }));
  // §2.6 LatentMoE
  t.push_back(row(R::MoeRouter, "moe.gate", G::MoE, M + "gate.weight", kBF16, [](const ModelConfig& c) -> Shape {
    return {c.num_experts, D(c)};
  }));
  t.push_back(row(R::MoeRouterBias, "moe.e_score_correction_bias", G::MoE, M + "gate.e_score_correction_bias", kF32,
                  [](const ModelConfig& c) -> Shape { return {c.num_experts}; }));
  t.push_back(row(R::MoeLatentDown, "moe.routed_expert_down_proj", G::MoE, M + "routed_expert_down_proj.weight", kBF16,
                  [](const ModelConfig& c) -> Shape {
                    return {c.routed_expert_hidden_size, D(c)};
                  }));
  t.push_back(row(
      R::MoeLatentNorm, "moe.routed_expert_norm", G::MoE, M + "routed_expert_norm.weight", kBF16,
      [](const ModelConfig& c) -> Shape { return {c.routed_expert_hidden_size}; }, latent_norm, "latent_moe_use_norm"));
  t.push_back(row(R::MoeLatentUp, "moe.routed_expert_up_proj", G::MoE, M + "routed_expert_up_proj.weight", kBF16,
                  [](const ModelConfig& c) -> Shape {
                    return {D(c), c.routed_expert_hidden_size};
                  }));
  t.push_back(row(
      R::SharedGate, "moe.shared_experts.gate_proj", G::MoE, M + "shared_experts.gate_proj.weight", kBF16,
      [](const ModelConfig& c) -> Shape {
        return {S(c), D(c)};
      },
      shared, "num_shared_experts > 0"));
  t.push_back(row(
      R::SharedUp, "moe.shared_experts.up_proj", G::MoE, M + "shared_experts.up_proj.weight", kBF16,
      [](const ModelConfig& c) -> Shape {
        return {S(c), D(c)};
      },
      shared, "num_shared_experts > 0"));
  t.push_back(row(
      R::SharedDown, "moe.shared_experts.down_proj", G::MoE, M + "shared_experts.down_proj.weight", kBF16,
      [](const ModelConfig& c) -> Shape {
        return {D(c), S(c)};
      },
      shared, "num_shared_experts > 0"));
  // §2.6 routed experts
  auto gate_up = [](const ModelConfig& c) -> Shape { return {c.moe_intermediate_size, c.routed_expert_hidden_size}; };
  t.push_back(row(R::ExpertW1, "expert.w1", G::Expert, X + "w1", kBF16, gate_up, nullptr, "", St::Mxfp4));
  t.push_back(row(
      R::ExpertW2, "expert.w2", G::Expert, X + "w2", kBF16,
      [](const ModelConfig& c) -> Shape {
        return {c.routed_expert_hidden_size, c.moe_intermediate_size};
      },
      nullptr, "", St::Mxfp4));
  t.push_back(row(R::ExpertW3, "expert.w3", G::Expert, X + "w3", kBF16, gate_up, nullptr, "", St::Mxfp4));
  // vision.md §2 vision tower and projector
  const std::string VT = "vision_tower.", VB = "vision_tower.encoder.blocks.{il}.";
  const char* const vw = "vision_config";
  auto vecDv = [](const ModelConfig& c) -> Shape { return {V(c).hidden_size}; };
  t.push_back(row(
      R::VisionPatchEmbed, "vision.patch_embed", G::VisionTower, VT + "patch_embed.proj.weight", kBF16,
      [](const ModelConfig& c) -> Shape {
        return {V(c).hidden_size, 3, V(c).patch_size, V(c).patch_size};
      },
      tower, vw));
  t.push_back(row(
      R::VisionPosEmb, "vision.pos_emb", G::VisionTower, VT + "patch_embed.pos_emb.weight", kBF16,
      [](const ModelConfig& c) -> Shape {
        return {V(c).pos_emb_height, V(c).pos_emb_width, V(c).hidden_size};
      },
      tower, vw));
  t.push_back(row(R::VisionNorm0, "vision.norm0", G::VisionBlock, VB + "norm0.weight", kBF16, vecDv, tower, vw));
  t.push_back(row(
      R::VisionWqkv, "vision.wqkv", G::VisionBlock, VB + "wqkv.weight", kBF16,
      [](const ModelConfig& c) -> Shape {
        return {3 * int64_t{V(c).qkv_hidden_size}, V(c).hidden_size};
      },
      tower, vw));
  t.push_back(row(
      R::VisionWo, "vision.wo", G::VisionBlock, VB + "wo.weight", kBF16,
      [](const ModelConfig& c) -> Shape {
        return {V(c).hidden_size, V(c).qkv_hidden_size};
      },
      tower, vw));
  t.push_back(row(R::VisionNorm1, "vision.norm1", G::VisionBlock, VB + "norm1.weight", kBF16, vecDv, tower, vw));
  t.push_back(row(
      R::VisionFc0, "vision.mlp.fc0", G::VisionBlock, VB + "mlp.fc0.weight", kBF16,
      [](const ModelConfig& c) -> Shape {
        return {V(c).intermediate_size, V(c).hidden_size};
      },
      tower, vw));
  t.push_back(row(
      R::VisionFc1, "vision.mlp.fc1", G::VisionBlock, VB + "mlp.fc1.weight", kBF16,
      [](const ModelConfig& c) -> Shape {
        return {V(c).hidden_size, V(c).intermediate_size};
      },
      tower, vw));
  t.push_back(row(R::VisionFinalNorm, "vision.final_layernorm", G::VisionTower, VT + "encoder.final_layernorm.weight",
                  kBF16, vecDv, tower, vw));
  t.push_back(row(
      R::ProjectorFc0, "projector.proj.0", G::Projector, "mm_projector.proj.0.weight", kBF16,
      [](const ModelConfig& c) -> Shape {
        return {V(c).merged_width(), V(c).merged_width()};
      },
      tower, vw));
  t.push_back(row(
      R::ProjectorFc2, "projector.proj.2", G::Projector, "mm_projector.proj.2.weight", kBF16,
      [](const ModelConfig& c) -> Shape {
        return {V(c).text_hidden_size, V(c).merged_width()};
      },
      tower, vw));
  t.push_back(row(
      R::ProjectorPostNorm, "projector.post_norm", G::Projector, "mm_projector.post_norm.weight", kBF16,
      [](const ModelConfig& c) -> Shape { return {V(c).text_hidden_size}; }, tower, vw));
  for (size_t i = 0; i < t.size(); ++i)
    if (static_cast<size_t>(t[i].role) != i)
      throw Error(std::string("tensor table: row ") + std::to_string(i) + " ('" + t[i].id +
                  "') is out of TensorRole order");
  if (static_cast<int>(t.size()) != kTensorRoleCount)
    throw Error("tensor table: " + std::to_string(t.size()) + " rows for " + std::to_string(kTensorRoleCount) +
                " roles");
  return t;
}

const std::vector<TensorKind>& rows() {
  static const std::vector<TensorKind> r = make_rows();
  return r;
}

std::string expand(const char* pattern, int il, int e) {
  std::string out;
  out.reserve(64);
  for (const char* p = pattern; *p;) {
    if (p[0] == '{' && p[1] == 'i' && p[2] == 'l' && p[3] == '}') {
      out += std::to_string(il);
      p += 4;
    } else if (p[0] == '{' && p[1] == 'e' && p[2] == '}') {
      out += std::to_string(e);
      p += 3;
    } else {
      out += *p++;
    }
  }
  return out;
}

bool layer_has(const LayerSpec& l, TensorGroup g) {
  switch (g) {
    case TensorGroup::Global: return false;
    case TensorGroup::Common: return true;
    case TensorGroup::KDA: return l.attn == AttnKind::KDA;
    case TensorGroup::MLA: return l.attn == AttnKind::MLA;
    case TensorGroup::DenseMLP: return l.ffn == FfnKind::Dense;
    case TensorGroup::MoE:
    case TensorGroup::Expert: return l.ffn == FfnKind::LatentMoE;
    case TensorGroup::VisionTower:
    case TensorGroup::VisionBlock:
    case TensorGroup::Projector: return false;
  }
  return false;
}

TensorSpec make_spec(const ModelConfig& c, const TensorKind& k, int il, int e) {
  TensorSpec s;
  s.name = expand(k.pattern.c_str(), il, e);
  s.shape = k.shape(c);
  s.dtypes = k.dtypes;
  s.storage = k.storage;
  s.group = k.group;
  s.role = k.role;
  s.il = il;
  s.expert = k.group == TensorGroup::Expert ? e : -1;
  s.zero_padded = k.zero_padded;
  return s;
}

std::vector<TensorSpec> group_tensors(const ModelConfig& c, TensorGroup g, int il, int e = -1) {
  std::vector<TensorSpec> r;
  for (const TensorKind& k : rows())
    if (k.group == g && (!k.present || k.present(c))) r.push_back(make_spec(c, k, il, e));
  return r;
}

// Matches `name` from position i against `pattern`; {il}/{e} take a run of digits.
bool match_pattern(std::string_view name, size_t& i, const char* pattern, int& il, int& e) {
  auto digits = [&](int& out) {
    const size_t s = i;
    long long v = 0;
    while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) {
      if (v <= INT_MAX) v = v * 10 + (name[i] - '0');
      ++i;
    }
    out = v <= INT_MAX ? static_cast<int>(v) : -1;
    return i > s;
  };
  for (const char* p = pattern; *p;) {
    if (p[0] == '{' && p[1] == 'i' && p[2] == 'l' && p[3] == '}') {
      if (!digits(il)) return false;
      p += 4;
    } else if (p[0] == '{' && p[1] == 'e' && p[2] == '}') {
      if (!digits(e)) return false;
      p += 3;
    } else {
      if (i >= name.size() || name[i] != *p) return false;
      ++i;
      ++p;
    }
  }
  return true;
}

std::optional<TensorNameMatch> match_kind(std::string_view name, const TensorKind& k) {
  size_t i = 0;
  int il = -1, e = -1;
  if (!match_pattern(name, i, k.pattern.c_str(), il, e)) return std::nullopt;
  const std::string_view rest = name.substr(i);
  if (k.storage == TensorStorage::Plain) {
    if (!rest.empty()) return std::nullopt;
  } else if (!rest.empty() && rest != ".weight_packed" && rest != ".weight_scale" && rest != ".weight") {
    return std::nullopt;
  }
  return TensorNameMatch{k.role, il, e, rest};
}

}  // namespace

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool TensorSpec::accepts_dtype(DType dt) const { return std::find(dtypes.begin(), dtypes.end(), dt) != dtypes.end(); }

bool TensorSpec::accepts_shape(const std::vector<int64_t>& v) const {
  if (v == shape) return true;
  return zero_padded && v.size() == shape.size() && !v.empty() && v[0] >= shape[0] &&
         std::equal(v.begin() + 1, v.end(), shape.begin() + 1);
}

std::span<const TensorKind> tensor_kinds() { return rows(); }

const TensorKind& tensor_kind(TensorRole role) {
  const int i = static_cast<int>(role);
  if (i < 0 || i >= kTensorRoleCount) throw Error("tensor table: no role " + std::to_string(i));
  return rows()[static_cast<size_t>(i)];
}

std::string tensor_name(TensorRole role, int il, int expert) {
  return expand(tensor_kind(role).pattern.c_str(), il, expert);
}

std::string_view text_tensor_name(std::string_view full_name) {
  const std::string_view prefix = kTextPrefix;
  return full_name.substr(0, prefix.size()) == prefix ? full_name.substr(prefix.size()) : full_name;
}

bool tensor_present(const ModelConfig& c, TensorRole role) {
  const TensorKind& k = tensor_kind(role);
  return !k.present || k.present(c);
}

TensorSpec tensor_spec(const ModelConfig& c, TensorRole role, int il, int expert) {
  const TensorKind& k = tensor_kind(role);
  if (k.present && !k.present(c))
    throw Error("tensor table: '" + k.pattern + "' is absent in this config (present when " + k.when + ")");
  if (k.group == TensorGroup::Global || k.group == TensorGroup::VisionTower || k.group == TensorGroup::Projector) {
    if (il != -1)
      throw Error("tensor table: '" + k.pattern + "' is a global tensor, asked for layer " + std::to_string(il));
  } else if (k.group == TensorGroup::VisionBlock) {
    if (il < 0 || il >= V(c).num_layers)
      throw Error("tensor table: '" + k.pattern + "': vision block " + std::to_string(il) + " outside [0, " +
                  std::to_string(V(c).num_layers) + ")");
  } else {
    if (il < 0 || il >= c.num_hidden_layers || static_cast<size_t>(il) >= c.plan.size())
      throw Error("tensor table: '" + k.pattern + "': layer " + std::to_string(il) + " outside [0, " +
                  std::to_string(c.num_hidden_layers) + ")");
    if (!layer_has(c.plan[static_cast<size_t>(il)], k.group))
      throw Error(std::string("tensor table: layer ") + std::to_string(il) + " has no '" + k.pattern +
                  "' (its plan: " + (c.plan[static_cast<size_t>(il)].attn == AttnKind::KDA ? "KDA" : "MLA") + " + " +
                  (c.plan[static_cast<size_t>(il)].ffn == FfnKind::Dense ? "dense MLP" : "LatentMoE") + ")");
  }
  if (k.group == TensorGroup::Expert) {
    if (expert < 0 || expert >= c.num_experts)
      throw Error("tensor table: '" + k.pattern + "': expert " + std::to_string(expert) + " outside [0, " +
                  std::to_string(c.num_experts) + ")");
  } else if (expert != -1) {
    throw Error("tensor table: '" + k.pattern + "' is not a routed-expert tensor, asked for expert " +
                std::to_string(expert));
  }
  return make_spec(c, k, il, expert);
}

std::optional<TensorNameMatch> match_tensor_name(const ModelConfig& c, std::string_view name) {
  for (const TensorKind& k : rows()) {
    const auto m = match_kind(name, k);
    if (!m || (k.present && !k.present(c))) continue;
    if (k.group == TensorGroup::VisionBlock) {
      if (m->il < 0 || m->il >= V(c).num_layers) continue;
    } else if (k.group != TensorGroup::Global && k.group != TensorGroup::VisionTower &&
               k.group != TensorGroup::Projector) {
      if (m->il < 0 || m->il >= c.num_hidden_layers || static_cast<size_t>(m->il) >= c.plan.size() ||
          !layer_has(c.plan[static_cast<size_t>(m->il)], k.group))
        continue;
    }
    if (k.group == TensorGroup::Expert && (m->expert < 0 || m->expert >= c.num_experts)) continue;
    return m;
  }
  return std::nullopt;
}

std::vector<TensorSpec> global_tensors(const ModelConfig& c) { return group_tensors(c, TensorGroup::Global, -1); }
std::vector<TensorSpec> common_layer_tensors(const ModelConfig& c, int il) {
  return group_tensors(c, TensorGroup::Common, il);
}
std::vector<TensorSpec> kda_tensors(const ModelConfig& c, int il) { return group_tensors(c, TensorGroup::KDA, il); }
std::vector<TensorSpec> mla_tensors(const ModelConfig& c, int il) { return group_tensors(c, TensorGroup::MLA, il); }
std::vector<TensorSpec> dense_mlp_tensors(const ModelConfig& c, int il) {
  return group_tensors(c, TensorGroup::DenseMLP, il);
}
std::vector<TensorSpec> moe_tensors(const ModelConfig& c, int il) { return group_tensors(c, TensorGroup::MoE, il); }
std::vector<TensorSpec> expert_tensors(const ModelConfig& c, int il, int e) {
  return group_tensors(c, TensorGroup::Expert, il, e);
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

std::vector<TensorSpec> vision_tensors(const ModelConfig& c) {
  std::vector<TensorSpec> r;
  if (!c.vision) return r;
  auto add = [&](TensorRole role, int il = -1) { r.push_back(make_spec(c, tensor_kind(role), il, -1)); };
  add(TensorRole::VisionPatchEmbed);
  add(TensorRole::VisionPosEmb);
  for (int b = 0; b < c.vision->num_layers; ++b)
    for (TensorRole role : {TensorRole::VisionNorm0, TensorRole::VisionWqkv, TensorRole::VisionWo,
                            TensorRole::VisionNorm1, TensorRole::VisionFc0, TensorRole::VisionFc1})
      add(role, b);
  add(TensorRole::VisionFinalNorm);
  add(TensorRole::ProjectorFc0);
  add(TensorRole::ProjectorFc2);
  add(TensorRole::ProjectorPostNorm);
  return r;
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
  for (const TensorKind& k : rows()) {
    if (k.storage != TensorStorage::Mxfp4) continue;
    const auto m = match_kind(b, k);
    if (m && m->suffix.empty()) return true;
  }
  return false;
}

bool is_vision_tensor_name(const std::string& n) {
  return n.rfind("vision_tower.", 0) == 0 || n.rfind("mm_projector.", 0) == 0;
}

}  // namespace k3
