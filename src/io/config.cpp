// config.json -> ModelConfig + LayerPlan (spec k3-architecture.md §1, §6.1-6.2).
#include "io/config.h"

#include <algorithm>
#include <climits>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/read_file.h"
#include "io/json_util.h"

namespace k3 {

using nlohmann::json;

int ModelConfig::n_kda_layers() const {
  return static_cast<int>(
      std::count_if(plan.begin(), plan.end(), [](const LayerSpec& l) { return l.attn == AttnKind::KDA; }));
}
int ModelConfig::n_mla_layers() const { return static_cast<int>(plan.size()) - n_kda_layers(); }
int ModelConfig::n_moe_layers() const {
  return static_cast<int>(
      std::count_if(plan.begin(), plan.end(), [](const LayerSpec& l) { return l.ffn == FfnKind::LatentMoE; }));
}
std::vector<int> ModelConfig::mla_layer_indices() const {
  std::vector<int> r;
  for (const auto& l : plan)
    if (l.attn == AttnKind::MLA) r.push_back(l.il);
  return r;
}

namespace {

// Typed access to one JSON object; errors name the origin file and the dotted key path.
class Reader {
 public:
  Reader(const json& obj, std::string origin, std::string path)
      : obj_(obj), origin_(std::move(origin)), path_(std::move(path)) {}

  std::string key_path(const std::string& k) const { return path_ + k; }
  [[noreturn]] void fail(const std::string& k, const std::string& what) const {
    throw Error(origin_ + ": key '" + key_path(k) + "': " + what);
  }
  const json* find(const std::string& k) const {
    auto it = obj_.find(k);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  const json& need(const std::string& k) const {
    const json* v = find(k);
    if (!v) throw Error(origin_ + ": missing required key '" + key_path(k) + "'");
    return *v;
  }
  int to_int(const std::string& k, const json& v) const {
    if (!v.is_number_integer() && !v.is_number_unsigned())
      fail(k, "expected an integer, found " + json_type_name(v) + " " + v.dump());
    if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(INT_MAX)
                               : (v.get<int64_t>() < INT_MIN || v.get<int64_t>() > INT_MAX))
      fail(k, "integer " + v.dump() + " out of range");
    return static_cast<int>(v.get<int64_t>());
  }
  int get_int(const std::string& k) const { return to_int(k, need(k)); }
  int get_int(const std::string& k, int def) const {
    const json* v = find(k);
    return v ? to_int(k, *v) : def;
  }
  int64_t get_int64(const std::string& k, int64_t def) const {
    const json* v = find(k);
    if (!v) return def;
    if (!v->is_number_integer() && !v->is_number_unsigned())
      fail(k, "expected an integer, found " + json_type_name(*v));
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail(k, "integer out of range");
    return v->get<int64_t>();
  }
  float to_float(const std::string& k, const json& v) const {
    if (!v.is_number()) fail(k, "expected a number, found " + json_type_name(v) + " " + v.dump());
    return static_cast<float>(v.get<double>());
  }
  float get_float(const std::string& k) const { return to_float(k, need(k)); }
  float get_float(const std::string& k, float def) const {
    const json* v = find(k);
    return v ? to_float(k, *v) : def;
  }
  std::optional<float> get_opt_float(const std::string& k) const {
    const json* v = find(k);
    if (!v) return std::nullopt;
    return to_float(k, *v);
  }
  bool get_bool(const std::string& k, bool def) const {
    const json* v = find(k);
    if (!v) return def;
    if (!v->is_boolean()) fail(k, "expected a boolean, found " + json_type_name(*v) + " " + v->dump());
    return v->get<bool>();
  }
  std::string get_string(const std::string& k, const std::string& def) const {
    const json* v = find(k);
    if (!v) return def;
    if (!v->is_string()) fail(k, "expected a string, found " + json_type_name(*v));
    return v->get<std::string>();
  }
  std::vector<int> get_int_list(const std::string& k) const {
    const json& v = need(k);
    if (!v.is_array()) fail(k, "expected an array of integers, found " + json_type_name(v));
    std::vector<int> r;
    for (size_t i = 0; i < v.size(); ++i) r.push_back(to_int(k + "[" + std::to_string(i) + "]", v[i]));
    return r;
  }
  /// Token id: integer, or a non-empty array of integers (first taken); def when absent.
  int get_token_id(const std::string& k, int def) const {
    const json* v = find(k);
    if (!v) return def;
    if (v->is_array()) {
      if (v->empty()) return def;
      return to_int(k + "[0]", (*v)[0]);
    }
    return to_int(k, *v);
  }
  Reader child(const std::string& k) const {
    const json& v = need(k);
    if (!v.is_object()) fail(k, "expected an object, found " + json_type_name(v));
    return Reader(v, origin_, key_path(k) + ".");
  }
  std::optional<Reader> opt_child(const std::string& k) const {
    const json* v = find(k);
    if (!v) return std::nullopt;
    if (!v->is_object()) fail(k, "expected an object, found " + json_type_name(*v));
    return Reader(*v, origin_, key_path(k) + ".");
  }
  const json& obj() const { return obj_; }
  bool has(const std::string& k) const { return find(k) != nullptr; }

 private:
  const json& obj_;
  std::string origin_;
  std::string path_;
};

void require(bool ok, const std::string& origin, const std::string& what) {
  if (!ok) throw Error(origin + ": inconsistent config: " + what);
}

// The quantization keys the engine does not read but whose value it assumes (MXFP4 is found from
// the header, with group 32 and E2M1 codes, spec §1.4, §4): any other value is refused, since
// honouring it silently would compute something else.
void read_quantization(const std::optional<Reader>& q, ModelConfig& c) {
  if (!q) return;
  c.quant_method = q->get_string("quant_method", "");
  c.quant_format = q->get_string("format", "");
  if (!c.quant_method.empty() && c.quant_method != "compressed-tensors")
    q->fail("quant_method", "\"" + c.quant_method + "\" is not supported (expected \"compressed-tensors\", spec §1.4)");
  if (!c.quant_format.empty() && c.quant_format != "mxfp4-pack-quantized")
    q->fail("format", "\"" + c.quant_format + "\" is not supported (expected \"mxfp4-pack-quantized\", spec §1.4)");
  if (auto groups = q->opt_child("config_groups")) {
    for (auto& [name, g] : groups->obj().items()) {
      if (!g.is_object()) continue;
      auto gr = groups->child(name);
      const std::string gf = gr.get_string("format", "");
      if (!gf.empty() && gf != "mxfp4-pack-quantized")
        gr.fail("format", "\"" + gf + "\" is not supported (expected \"mxfp4-pack-quantized\", spec §1.4)");
      if (auto w = gr.opt_child("weights")) {
        const int gs = w->get_int("group_size", 0);
        if (w->has("group_size") && gs != 32)
          w->fail("group_size", std::to_string(gs) + " is not supported (MXFP4 blocks are 32 values, spec §4)");
        if (w->has("num_bits") && w->get_int("num_bits", 4) != 4)
          w->fail("num_bits",
                  std::to_string(w->get_int("num_bits", 4)) + " is not supported (MXFP4 is 4-bit, spec §1.4)");
        if (c.quant_group_size == 0) c.quant_group_size = gs;
      }
    }
  }
}

void read_text(const Reader& t, ModelConfig& c) {
  c.hidden_size = t.get_int("hidden_size");
  c.num_hidden_layers = t.get_int("num_hidden_layers");
  c.vocab_size = t.get_int("vocab_size");
  c.rms_norm_eps = t.get_float("rms_norm_eps", 1e-6f);
  c.tie_word_embeddings = t.get_bool("tie_word_embeddings", c.tie_word_embeddings);
  c.attn_res_block_size = t.get_int("attn_res_block_size");
  c.max_position_embeddings = t.get_int64("max_position_embeddings", 0);
  c.num_nextn_predict_layers = t.get_int("num_nextn_predict_layers", 0);

  c.num_attention_heads = t.get_int("num_attention_heads");
  c.q_lora_rank = t.get_int("q_lora_rank");
  c.kv_lora_rank = t.get_int("kv_lora_rank");
  c.qk_nope_head_dim = t.get_int("qk_nope_head_dim");
  c.qk_rope_head_dim = t.get_int("qk_rope_head_dim");
  c.v_head_dim = t.get_int("v_head_dim");
  c.mla_use_nope = t.get_bool("mla_use_nope", false);
  c.mla_use_output_gate = t.get_bool("mla_use_output_gate", false);

  c.hidden_act = t.get_string("hidden_act", "silu");
  c.situ_beta = t.get_float("activation_situ_beta", 1.0f);
  c.situ_linear_beta = t.get_opt_float("activation_situ_linear_beta");
  c.intermediate_size = t.get_int("intermediate_size");
  c.first_k_dense_replace = t.get_int("first_k_dense_replace", 0);
  c.moe_layer_freq = t.get_int("moe_layer_freq", 1);
  c.num_experts = t.get_int("num_experts");
  c.num_experts_per_token = t.get_int("num_experts_per_token");
  c.num_shared_experts = t.get_int("num_shared_experts", 0);
  c.moe_intermediate_size = t.get_int("moe_intermediate_size");
  c.routed_expert_hidden_size = t.get_int("routed_expert_hidden_size");
  c.latent_moe_use_norm = t.get_bool("latent_moe_use_norm", false);
  c.moe_router_activation_func = t.get_string("moe_router_activation_func", "sigmoid");
  c.moe_renormalize = t.get_bool("moe_renormalize", c.num_experts_per_token > 1);
  c.routed_scaling_factor = t.get_float("routed_scaling_factor", 1.0f);
  c.num_expert_group = t.get_int("num_expert_group", 1);
  c.topk_group = t.get_int("topk_group", 1);
  // not read by the router; only K3's value (no grouping, sigmoid + bias top-k) is what it computes
  const std::string topk_method = t.get_string("topk_method", "noaux_tc");
  if (topk_method != "noaux_tc")
    t.fail("topk_method",
           "\"" + topk_method + "\" is not supported (the router implements K3's \"noaux_tc\", spec §1.2)");
  if (t.has("max_position_embeddings") && c.max_position_embeddings <= 0)
    t.fail("max_position_embeddings",
           "expected a positive integer, found " + std::to_string(c.max_position_embeddings));

  Reader la = t.child("linear_attn_config");
  c.kda_layers = la.get_int_list("kda_layers");
  c.full_attn_layers = la.get_int_list("full_attn_layers");
  c.kda_num_heads = la.get_int("num_heads");
  c.kda_head_dim = la.get_int("head_dim");
  c.short_conv_kernel_size = la.get_int("short_conv_kernel_size");
  c.gate_lower_bound = la.get_opt_float("gate_lower_bound");
  c.use_full_rank_gate = la.get_bool("use_full_rank_gate", false);
}

void validate(const ModelConfig& c, const std::string& o) {
  auto pos = [&](int v, const char* k) {
    require(v > 0, o, std::string(k) + " must be > 0, found " + std::to_string(v));
  };
  pos(c.hidden_size, "hidden_size");
  pos(c.num_hidden_layers, "num_hidden_layers");
  pos(c.vocab_size, "vocab_size");
  pos(c.attn_res_block_size, "attn_res_block_size");
  pos(c.num_attention_heads, "num_attention_heads");
  pos(c.q_lora_rank, "q_lora_rank");
  pos(c.kv_lora_rank, "kv_lora_rank");
  pos(c.qk_nope_head_dim, "qk_nope_head_dim");
  require(c.qk_rope_head_dim >= 0, o, "qk_rope_head_dim must be >= 0");
  pos(c.v_head_dim, "v_head_dim");
  pos(c.intermediate_size, "intermediate_size");
  pos(c.moe_layer_freq, "moe_layer_freq");
  pos(c.num_experts, "num_experts");
  pos(c.num_experts_per_token, "num_experts_per_token");
  pos(c.moe_intermediate_size, "moe_intermediate_size");
  pos(c.routed_expert_hidden_size, "routed_expert_hidden_size");
  pos(c.num_expert_group, "num_expert_group");
  pos(c.topk_group, "topk_group");
  pos(c.kda_num_heads, "linear_attn_config.num_heads");
  pos(c.kda_head_dim, "linear_attn_config.head_dim");
  pos(c.short_conv_kernel_size, "linear_attn_config.short_conv_kernel_size");
  require(c.num_shared_experts >= 0, o, "num_shared_experts must be >= 0");
  require(c.first_k_dense_replace >= 0 && c.first_k_dense_replace <= c.num_hidden_layers, o,
          "first_k_dense_replace " + std::to_string(c.first_k_dense_replace) +
              " outside [0, num_hidden_layers=" + std::to_string(c.num_hidden_layers) + "]");
  require(c.num_experts_per_token <= c.num_experts, o,
          "num_experts_per_token " + std::to_string(c.num_experts_per_token) + " > num_experts " +
              std::to_string(c.num_experts));
  require(c.topk_group <= c.num_expert_group && c.num_experts % c.num_expert_group == 0, o,
          "num_expert_group/topk_group (" + std::to_string(c.num_expert_group) + "/" + std::to_string(c.topk_group) +
              ") do not divide num_experts " + std::to_string(c.num_experts));
  require(c.rms_norm_eps > 0 && c.mla_norm_eps > 0, o, "rms_norm_eps must be > 0");
  require(c.num_nextn_predict_layers == 0, o,
          "num_nextn_predict_layers = " + std::to_string(c.num_nextn_predict_layers) +
              ": MTP layers are not supported (K3 ships none)");
  require(c.use_full_rank_gate, o,
          "linear_attn_config.use_full_rank_gate is false (Kimi-Linear low-rank output gate); "
          "K3 uses the full-rank g_proj (spec §1.3)");
  require(c.moe_router_activation_func == "sigmoid" || c.moe_router_activation_func == "softmax", o,
          "moe_router_activation_func \"" + c.moe_router_activation_func + "\" (expected sigmoid)");
  require(c.hidden_act == "situ" || c.hidden_act == "silu", o,
          "hidden_act \"" + c.hidden_act + "\" (expected situ or silu)");
  // kda_layers / full_attn_layers: 1-indexed, disjoint, together exactly 1..L.
  const int L = c.num_hidden_layers;
  std::vector<int> owner(static_cast<size_t>(L) + 1, 0);  // 0 none, 1 kda, 2 full
  auto mark = [&](const std::vector<int>& v, int tag, const char* name) {
    for (int x : v) {
      require(x >= 1 && x <= L, o,
              std::string("linear_attn_config.") + name + " entry " + std::to_string(x) +
                  " outside 1..num_hidden_layers=" + std::to_string(L) + " (lists are 1-indexed)");
      auto& ow = owner[static_cast<size_t>(x)];
      require(ow != tag, o, std::string("linear_attn_config.") + name + " lists layer " + std::to_string(x) + " twice");
      require(ow == 0, o,
              "layer " + std::to_string(x) + " is in both linear_attn_config.kda_layers and full_attn_layers");
      ow = tag;
    }
  };
  mark(c.kda_layers, 1, "kda_layers");
  mark(c.full_attn_layers, 2, "full_attn_layers");
  for (int x = 1; x <= L; ++x)
    require(
        owner[static_cast<size_t>(x)] != 0, o,
        "layer " + std::to_string(x) + " (1-indexed) is in neither linear_attn_config.kda_layers nor full_attn_layers");
}

}  // namespace

ModelConfig parse_config(const std::string& json_text, const std::string& origin) {
  json top = parse_json_strict(json_text, origin);
  if (!top.is_object()) throw Error(origin + ": config must be a JSON object, found " + json_type_name(top));
  Reader r(top, origin, "");
  ModelConfig c;
  std::string arch;
  if (const json* a = r.find("architectures")) {
    if (!a->is_array() || a->empty() || !(*a)[0].is_string())
      r.fail("architectures", "expected a non-empty array of strings, found " + a->dump());
    arch = (*a)[0].get<std::string>();
  }
  c.model_type = r.get_string("model_type", "");
  c.architecture = arch;
  const bool k3_wrapper = arch == "KimiK3ForConditionalGeneration" || (arch.empty() && c.model_type == "kimi_k3");
  const bool flat = arch == "KimiLinearForCausalLM" || (arch.empty() && c.model_type == "kimi_linear");
  if (!k3_wrapper && !flat)
    throw Error(origin + ": unknown architecture '" + (arch.empty() ? "(none)" : arch) + "' (model_type '" +
                c.model_type +
                "'); expected KimiK3ForConditionalGeneration, or KimiLinearForCausalLM / kimi_linear with K3 keys");
  std::optional<Reader> text_holder;
  if (k3_wrapper) {
    c.wrapped = true;
    text_holder.emplace(r.child("text_config"));
  } else {
    if (!r.has("attn_res_block_size"))
      throw Error(origin + ": flat " + (arch.empty() ? c.model_type : arch) +
                  " config lacks the K3 key 'attn_res_block_size' (a Kimi-Linear model, not K3)");
    text_holder.emplace(r);
  }
  const Reader& t = *text_holder;
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", false);
  read_text(t, c);
  c.bos_token_id = r.get_token_id("bos_token_id", t.get_token_id("bos_token_id", -1));
  c.eos_token_id = r.get_token_id("eos_token_id", t.get_token_id("eos_token_id", -1));
  c.pad_token_id = r.get_token_id("pad_token_id", t.get_token_id("pad_token_id", -1));
  // explicit ids must name a token of the model's vocabulary (absent = -1, "none")
  for (const auto& [key, id] : {std::pair<const char*, int>{"bos_token_id", c.bos_token_id},
                                {"eos_token_id", c.eos_token_id},
                                {"pad_token_id", c.pad_token_id}}) {
    const bool given = r.has(key) || t.has(key);
    if (given && (id < 0 || id >= c.vocab_size))
      (r.has(key) ? r : t)
          .fail(key, "token id " + std::to_string(id) +
                         " outside the vocabulary [0, vocab_size=" + std::to_string(c.vocab_size) + ")");
  }
  if (auto q = t.opt_child("quantization_config")) read_quantization(q, c);
  else if (c.wrapped) read_quantization(r.opt_child("quantization_config"), c);
  validate(c, origin);
  c.vision = parse_vision_config(top, origin, c.hidden_size, &c.vision_kind);

  c.plan.resize(static_cast<size_t>(c.num_hidden_layers));
  std::set<int> kda(c.kda_layers.begin(), c.kda_layers.end());
  for (int il = 0; il < c.num_hidden_layers; ++il) {
    LayerSpec& l = c.plan[static_cast<size_t>(il)];
    l.il = il;
    l.attn = kda.count(il + 1) ? AttnKind::KDA : AttnKind::MLA;
    l.ffn = (il < c.first_k_dense_replace || il % c.moe_layer_freq != 0) ? FfnKind::Dense : FfnKind::LatentMoE;
    l.snapshot = il % c.attn_res_block_size == 0;
  }
  return c;
}

ModelConfig load_config(const std::filesystem::path& config_json) {
  ReadLimits lim;
  lim.max_bytes = kMetadataFileLimit;
  return parse_config(read_file_bounded(config_json, "config.json", lim), config_json.string());
}

void check_config_token_ids(const ModelConfig& c, int32_t n_tokenizer_ids, const std::string& origin) {
  for (const auto& [key, id] :
       {std::pair<const char*, int>{"bos_token_id", c.bos_token_id}, {"eos_token_id", c.eos_token_id}})
    if (id >= n_tokenizer_ids)
      throw Error(origin + ": key '" + key + "': token id " + std::to_string(id) + " is not in the tokenizer (" +
                  std::to_string(n_tokenizer_ids) + " ids: tiktoken.model + tokenizer_config.json)");
}

}  // namespace k3
