#include "model/weights.h"

#include <cstring>
#include <mutex>
#include <string>

#include "core/bf16.h"
#include "core/error.h"
#include "kernels/threads.h"

namespace k3 {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::string desc(DType dt, const std::vector<int64_t>& s) {
  return std::string(dtype_name(dt)) + shape_str(s);
}

/// A matrix/tensor used in place: dtype must be BF16 or F32 (fp32 decode inside the kernels).
const TensorView* bind_matrix(const Checkpoint& ck, const std::string& name, std::vector<int64_t> shape) {
  const TensorView& t = ck.get(name);
  if ((t.dtype != DType::BF16 && t.dtype != DType::F32) || t.shape != shape)
    throw Error("tensor '" + t.name + "': expected BF16" + shape_str(shape) + ", found " +
                desc(t.dtype, t.shape));
  return &t;
}

std::vector<float> to_f32(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t.dtype == DType::BF16) {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      out[i] = bf16_to_f32(h);
    } else {
      std::memcpy(&out[i], t.data + 4 * i, 4);
    }
  }
  return out;
}

/// A small vector decoded to fp32; BF16 or F32 storage, exact shape.
std::vector<float> bind_vector(const Checkpoint& ck, const std::string& name, std::vector<int64_t> shape) {
  const TensorView& t = ck.get(name);
  if ((t.dtype != DType::BF16 && t.dtype != DType::F32) || t.shape != shape)
    throw Error("tensor '" + t.name + "': expected BF16 or F32" + shape_str(shape) + ", found " +
                desc(t.dtype, t.shape));
  return to_f32(t);
}

Mxfp4Matrix bind_mxfp4(const Checkpoint& ck, const std::string& base, int64_t rows, int64_t cols) {
  if (ck.find(base + ".weight_packed") == nullptr && ck.find(base + ".weight") != nullptr)
    throw Error("tensor '" + ck.get(base + ".weight").name +
                "': routed experts stored unquantized are not supported; k3.cpp computes routed experts "
                "on compressed-tensors MXFP4 ('" + base + ".weight_packed' + '.weight_scale', spec §4)");
  Mxfp4Matrix m = ck.mxfp4(base);
  if (m.rows != rows || m.cols != cols)
    throw Error("tensor '" + base + ".weight_packed': expected MXFP4 matrix [" + std::to_string(rows) +
                ", " + std::to_string(cols) + "], found [" + std::to_string(m.rows) + ", " +
                std::to_string(m.cols) + "]");
  return m;
}

AttnResWeights bind_attn_res(const Checkpoint& ck, const std::string& prefix, int64_t D) {
  std::vector<float> norm = bind_vector(ck, prefix + "norm.weight", {D});
  std::vector<float> proj = bind_vector(ck, prefix + "proj.weight", {1, D});
  AttnResWeights w;
  w.score.resize(static_cast<size_t>(D));
  for (int64_t d = 0; d < D; ++d) w.score[d] = norm[d] * proj[d];  // exact fold (spec §3.1)
  return w;
}

KdaWeights bind_kda(const Checkpoint& ck, const ModelConfig& c, const std::string& p) {
  const int64_t D = c.hidden_size, H = c.kda_num_heads, d = c.kda_head_dim, C = H * d,
                K = c.short_conv_kernel_size;
  if (!c.use_full_rank_gate)
    throw Error("config: linear_attn_config.use_full_rank_gate = false (low-rank g_a/g_b output "
                "gate) is not supported; expected true as in K3");
  KdaWeights w;
  w.q_proj = bind_matrix(ck, p + "q_proj.weight", {C, D});
  w.k_proj = bind_matrix(ck, p + "k_proj.weight", {C, D});
  w.v_proj = bind_matrix(ck, p + "v_proj.weight", {C, D});
  w.q_conv = bind_vector(ck, p + "q_conv1d.weight", {C, 1, K});
  w.k_conv = bind_vector(ck, p + "k_conv1d.weight", {C, 1, K});
  w.v_conv = bind_vector(ck, p + "v_conv1d.weight", {C, 1, K});
  w.f_a = bind_matrix(ck, p + "f_a_proj.weight", {d, D});
  w.f_b = bind_matrix(ck, p + "f_b_proj.weight", {C, d});
  w.b_proj = bind_matrix(ck, p + "b_proj.weight", {H, D});
  w.g_proj = bind_matrix(ck, p + "g_proj.weight", {C, D});
  w.dt_bias = bind_vector(ck, p + "dt_bias", {C});
  {
    // A_log is per HEAD (spec §2.3, pitfall 3): K3 stores [128] zero-padded past H; Kimi-Linear
    // stored [1, 1, H, 1]. Accept a 1-D vector of length >= H or any shape with exactly H entries.
    const TensorView& t = ck.get(p + "A_log");
    const bool ok_dtype = t.dtype == DType::F32 || t.dtype == DType::BF16;
    const bool ok_shape = (t.shape.size() == 1 && t.shape[0] >= H) || t.numel() == H;
    if (!ok_dtype || !ok_shape)
      throw Error("tensor '" + t.name + "': expected F32[>= " + std::to_string(H) +
                  "] (one entry per KDA head), found " + desc(t.dtype, t.shape));
    w.a_log = to_f32(t);
    w.a_log.resize(static_cast<size_t>(H));
  }
  w.o_norm = bind_vector(ck, p + "o_norm.weight", {d});
  w.o_proj = bind_matrix(ck, p + "o_proj.weight", {D, C});
  return w;
}

MlaWeights bind_mla(const Checkpoint& ck, const ModelConfig& c, const std::string& p) {
  const int64_t D = c.hidden_size, Hm = c.num_attention_heads, qr = c.q_lora_rank,
                kvr = c.kv_lora_rank, dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim,
                dv = c.v_head_dim;
  if (!c.mla_use_nope)
    throw Error("config: mla_use_nope = false (rotary MLA) is not supported; K3 uses NoPE");
  MlaWeights w;
  w.q_a = bind_matrix(ck, p + "q_a_proj.weight", {qr, D});
  w.q_a_norm = bind_vector(ck, p + "q_a_layernorm.weight", {qr});
  w.q_b = bind_matrix(ck, p + "q_b_proj.weight", {Hm * (dn + dr), qr});
  w.kv_a = bind_matrix(ck, p + "kv_a_proj_with_mqa.weight", {kvr + dr, D});
  w.kv_a_norm = bind_vector(ck, p + "kv_a_layernorm.weight", {kvr});
  w.kv_b = bind_matrix(ck, p + "kv_b_proj.weight", {Hm * (dn + dv), kvr});
  if (c.mla_use_output_gate) w.g_proj = bind_matrix(ck, p + "g_proj.weight", {Hm * dv, D});
  w.o_proj = bind_matrix(ck, p + "o_proj.weight", {D, Hm * dv});
  return w;
}

GluMlpWeights bind_glu(const Checkpoint& ck, const std::string& p, int64_t D, int64_t I) {
  GluMlpWeights w;
  w.gate = bind_matrix(ck, p + "gate_proj.weight", {I, D});
  w.up = bind_matrix(ck, p + "up_proj.weight", {I, D});
  w.down = bind_matrix(ck, p + "down_proj.weight", {D, I});
  return w;
}

MoeWeights bind_moe(const Checkpoint& ck, const ModelConfig& c, const std::string& p) {
  const int64_t D = c.hidden_size, E = c.num_experts, L = c.routed_expert_hidden_size,
                Im = c.moe_intermediate_size;
  if (c.moe_router_activation_func != "sigmoid")
    throw Error("config: moe_router_activation_func '" + c.moe_router_activation_func +
                "' is not supported; expected \"sigmoid\"");
  MoeWeights w;
  w.router = bind_matrix(ck, p + "gate.weight", {E, D});
  w.bias = bind_vector(ck, p + "gate.e_score_correction_bias", {E});
  w.down = bind_matrix(ck, p + "routed_expert_down_proj.weight", {L, D});
  if (c.latent_moe_use_norm) w.latent_norm = bind_vector(ck, p + "routed_expert_norm.weight", {L});
  w.up = bind_matrix(ck, p + "routed_expert_up_proj.weight", {D, L});
  if (c.num_shared_experts > 0)
    w.shared = bind_glu(ck, p + "shared_experts.", D, int64_t{c.num_shared_experts} * Im);
  w.experts.resize(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = p + "experts." + std::to_string(e) + ".";
    w.experts[e].w1 = bind_mxfp4(ck, x + "w1", Im, L);
    w.experts[e].w2 = bind_mxfp4(ck, x + "w2", L, Im);
    w.experts[e].w3 = bind_mxfp4(ck, x + "w3", Im, L);
  }
  return w;
}

}  // namespace

ModelWeights bind_weights(const Checkpoint& ck) {
  const ModelConfig& c = ck.config();
  const int64_t D = c.hidden_size, V = c.vocab_size;
  if (static_cast<int>(c.plan.size()) != c.num_hidden_layers)
    throw Error("config: layer plan has " + std::to_string(c.plan.size()) + " entries, expected " +
                std::to_string(c.num_hidden_layers));
  ModelWeights w;
  w.embed = bind_matrix(ck, "model.embed_tokens.weight", {V, D});
  if (c.tie_word_embeddings && ck.find("lm_head.weight") == nullptr)
    w.lm_head = w.embed;
  else
    w.lm_head = bind_matrix(ck, "lm_head.weight", {V, D});
  w.final_norm = bind_vector(ck, "model.norm.weight", {D});
  w.out_res = bind_attn_res(ck, "model.output_attn_res_", D);
  w.layers.resize(c.plan.size());
  for (size_t il = 0; il < c.plan.size(); ++il) {
    LayerWeights& L = w.layers[il];
    L.spec = c.plan[il];
    const std::string P = "model.layers." + std::to_string(il) + ".";
    L.input_norm = bind_vector(ck, P + "input_layernorm.weight", {D});
    L.post_norm = bind_vector(ck, P + "post_attention_layernorm.weight", {D});
    L.attn_res = bind_attn_res(ck, P + "self_attention_res_", D);
    L.ffn_res = bind_attn_res(ck, P + "mlp_res_", D);
    if (L.spec.attn == AttnKind::KDA)
      L.kda = bind_kda(ck, c, P + "self_attn.");
    else
      L.mla = bind_mla(ck, c, P + "self_attn.");
    if (L.spec.ffn == FfnKind::Dense)
      L.dense = bind_glu(ck, P + "mlp.", D, c.intermediate_size);
    else
      L.moe = bind_moe(ck, c, P + "block_sparse_moe.");
  }
  return w;
}

uint64_t quantize_trunk(ModelWeights& w, QuantKind kind, const ProgressFn& progress) {
  std::vector<const TensorView**> slots;
  auto add = [&](const TensorView*& p) {
    if (p && p->dtype == DType::BF16 && p->shape.size() == 2 && p->shape[1] % 32 == 0 && !p->quant) slots.push_back(&p);
  };
  if (w.lm_head != w.embed) add(w.lm_head);
  for (LayerWeights& L : w.layers) {
    if (L.spec.attn == AttnKind::KDA) {
      for (const TensorView** p : {&L.kda.q_proj, &L.kda.k_proj, &L.kda.v_proj, &L.kda.f_a, &L.kda.f_b,
                                   &L.kda.b_proj, &L.kda.g_proj, &L.kda.o_proj})
        add(*p);
    } else {
      for (const TensorView** p : {&L.mla.q_a, &L.mla.q_b, &L.mla.kv_a, &L.mla.g_proj, &L.mla.o_proj}) add(*p);
    }
    if (L.spec.ffn == FfnKind::Dense) {
      for (const TensorView** p : {&L.dense.gate, &L.dense.up, &L.dense.down}) add(*p);
    } else {
      add(L.moe.down);
      add(L.moe.up);
      if (L.moe.shared)
        for (const TensorView** p : {&L.moe.shared->gate, &L.moe.shared->up, &L.moe.shared->down}) add(*p);
    }
  }
  std::vector<QuantMatrix> q(slots.size());
  std::mutex progress_mu;
  int64_t n_done = 0;
  const int64_t n_slots = static_cast<int64_t>(slots.size());
  if (progress) progress("trunk quantization", 0, n_slots);
  parallel_for(n_slots, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      q[static_cast<size_t>(i)] = quantize_matrix(**slots[static_cast<size_t>(i)], kind);
      if (progress) {
        std::lock_guard<std::mutex> lock(progress_mu);
        progress("trunk quantization", ++n_done, n_slots);
      }
    }
  });
  uint64_t bytes = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    w.trunk_quant.push_back(std::move(q[i]));
    bytes += w.trunk_quant.back().bytes();
    TensorView v = **slots[i];
    v.quant = &w.trunk_quant.back();
    w.trunk_views.push_back(std::move(v));
    *slots[i] = &w.trunk_views.back();
  }
  return bytes;
}

}  // namespace k3
