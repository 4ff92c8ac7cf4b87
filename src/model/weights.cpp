#include "model/weights.h"

#include <chrono>
#include <cstring>
#include <unordered_map>
#include <mutex>
#include <string>

#include "core/bf16.h"
#include "core/error.h"
#include "io/tensor_table.h"
#include "kernels/threads.h"

namespace k3 {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::string dtypes_str(const std::vector<DType>& d) {
  std::string r;
  for (size_t i = 0; i < d.size(); ++i) r += (i ? " or " : "") + std::string(dtype_name(d[i]));
  return r;
}

/// Looks every tensor up through the tensor table (io/tensor_table.h): the row gives the name,
/// the shape from the config and the accepted dtypes; the checkpoint gives the view.
class Binder {
 public:
  explicit Binder(const Checkpoint& ck) : ck_(ck), c_(ck.config()) {}

  /// The stored tensor of `s`, checked with the table's one acceptance rule (the validator at
  /// open applies the same rule, so this fails only on a Checkpoint that skipped validation).
  const TensorView& stored(const TensorSpec& s) const {
    const TensorView& t = ck_.get(s.name);
    if (!s.accepts_dtype(t.dtype) || !s.accepts_shape(t.shape))
      throw Error("tensor '" + t.name + "': expected " + dtypes_str(s.dtypes) + shape_str(s.shape) +
                  (s.zero_padded ? " (or zero-padded along dim 0)" : "") + ", found " +
                  std::string(dtype_name(t.dtype)) + shape_str(t.shape));
    return t;
  }

  /// A matrix used in place (the kernels decode it inside their loops).
  const TensorView* matrix(TensorRole r, int il = -1) const { return &stored(tensor_spec(c_, r, il)); }

  /// A small vector decoded to fp32: the first numel(logical shape) entries (a tensor
  /// zero-padded along dim 0 keeps its real entries).
  std::vector<float> vector(TensorRole r, int il = -1) const {
    const TensorSpec s = tensor_spec(c_, r, il);
    const TensorView& t = stored(s);
    std::vector<float> out(static_cast<size_t>(s.numel()));
    for (size_t i = 0; i < out.size(); ++i) {
      if (t.dtype == DType::BF16) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      } else if (t.dtype == DType::F32) {
        std::memcpy(&out[i], t.data + 4 * i, 4);
      } else {
        throw Error("tensor '" + t.name + "': a vector is decoded from BF16 or F32, found " +
                    std::string(dtype_name(t.dtype)));
      }
    }
    return out;
  }

  /// Routed expert matrix `r` of expert `e` in layer `il`, MXFP4 only.
  Mxfp4Matrix expert(TensorRole r, int il, int e) const {
    const TensorSpec s = tensor_spec(c_, r, il, e);
    const std::string& base = s.name;
    if (ck_.find(base + ".weight_packed") == nullptr && ck_.find(base + ".weight") != nullptr)
      throw Error("tensor '" + ck_.get(base + ".weight").name +
                  "': routed experts stored unquantized are not supported; k3.cpp computes routed experts "
                  "on compressed-tensors MXFP4 ('" +
                  base + ".weight_packed' + '.weight_scale', spec §4)");
    Mxfp4Matrix m = ck_.mxfp4(base);
    if (m.rows != s.shape[0] || m.cols != s.shape[1])
      throw Error("tensor '" + base + ".weight_packed': expected MXFP4 matrix " + shape_str(s.shape) + ", found [" +
                  std::to_string(m.rows) + ", " + std::to_string(m.cols) + "]");
    return m;
  }

  /// score = res_norm.weight ⊙ res_proj.weight (spec §3.1), an exact fold.
  AttnResWeights attn_res(TensorRole norm_role, TensorRole proj_role, int il = -1) const {
    const std::vector<float> norm = vector(norm_role, il);
    const std::vector<float> proj = vector(proj_role, il);
    AttnResWeights w;
    w.score.resize(norm.size());
    for (size_t d = 0; d < norm.size(); ++d) w.score[d] = norm[d] * proj[d];
    return w;
  }

  KdaWeights kda(int il) const {
    if (!c_.use_full_rank_gate)
      throw Error(
          "config: linear_attn_config.use_full_rank_gate = false (low-rank g_a/g_b output "
          "gate) is not supported; expected true as in K3");
    using R = TensorRole;
    KdaWeights w;
    w.q_proj = matrix(R::KdaQProj, il);
    w.k_proj = matrix(R::KdaKProj, il);
    w.v_proj = matrix(R::KdaVProj, il);
    w.q_conv = vector(R::KdaQConv, il);
    w.k_conv = vector(R::KdaKConv, il);
    w.v_conv = vector(R::KdaVConv, il);
    w.f_a = matrix(R::KdaFA, il);
    w.f_b = matrix(R::KdaFB, il);
    w.b_proj = matrix(R::KdaBProj, il);
    w.g_proj = matrix(R::KdaGProj, il);
    w.dt_bias = vector(R::KdaDtBias, il);
    w.a_log = vector(R::KdaALog, il);  // [H]: the real entries of the (possibly padded) A_log
    w.o_norm = vector(R::KdaONorm, il);
    w.o_proj = matrix(R::KdaOProj, il);
    return w;
  }

  MlaWeights mla(int il) const {
    if (!c_.mla_use_nope) throw Error("config: mla_use_nope = false (rotary MLA) is not supported; K3 uses NoPE");
    using R = TensorRole;
    MlaWeights w;
    w.q_a = matrix(R::MlaQA, il);
    w.q_a_norm = vector(R::MlaQANorm, il);
    w.q_b = matrix(R::MlaQB, il);
    w.kv_a = matrix(R::MlaKvA, il);
    w.kv_a_norm = vector(R::MlaKvANorm, il);
    w.kv_b = matrix(R::MlaKvB, il);
    if (tensor_present(c_, R::MlaGProj)) w.g_proj = matrix(R::MlaGProj, il);
    w.o_proj = matrix(R::MlaOProj, il);
    return w;
  }

  GluMlpWeights glu(TensorRole gate, TensorRole up, TensorRole down, int il) const {
    GluMlpWeights w;
    w.gate = matrix(gate, il);
    w.up = matrix(up, il);
    w.down = matrix(down, il);
    return w;
  }

  MoeWeights moe(int il) const {
    if (c_.moe_router_activation_func != "sigmoid")
      throw Error("config: moe_router_activation_func '" + c_.moe_router_activation_func +
                  "' is not supported; expected \"sigmoid\"");
    using R = TensorRole;
    MoeWeights w;
    w.router = matrix(R::MoeRouter, il);
    w.layer = il;
    w.name_prefix = w.router->name.substr(0, w.router->name.size() - tensor_name(R::MoeRouter, il).size());
    w.bias = vector(R::MoeRouterBias, il);
    w.down = matrix(R::MoeLatentDown, il);
    if (tensor_present(c_, R::MoeLatentNorm)) w.latent_norm = vector(R::MoeLatentNorm, il);
    w.up = matrix(R::MoeLatentUp, il);
    if (tensor_present(c_, R::SharedGate)) w.shared = glu(R::SharedGate, R::SharedUp, R::SharedDown, il);
    w.experts.resize(static_cast<size_t>(c_.num_experts));
    for (int e = 0; e < c_.num_experts; ++e) {
      w.experts[static_cast<size_t>(e)].w1 = expert(R::ExpertW1, il, e);
      w.experts[static_cast<size_t>(e)].w2 = expert(R::ExpertW2, il, e);
      w.experts[static_cast<size_t>(e)].w3 = expert(R::ExpertW3, il, e);
    }
    return w;
  }

 private:
  const Checkpoint& ck_;
  const ModelConfig& c_;
};

}  // namespace

ModelWeights bind_weights(const Checkpoint& ck) {
  const ModelConfig& c = ck.config();
  if (static_cast<int>(c.plan.size()) != c.num_hidden_layers)
    throw Error("config: layer plan has " + std::to_string(c.plan.size()) + " entries, expected " +
                std::to_string(c.num_hidden_layers));
  const Binder b(ck);
  using R = TensorRole;
  ModelWeights w;
  w.embed = b.matrix(R::EmbedTokens);
  // Tied embeddings: the table has no lm_head (a stored one is refused at open); the head is the embedding.
  w.lm_head_tied = !tensor_present(c, R::LmHead);
  w.lm_head = w.lm_head_tied ? w.embed : b.matrix(R::LmHead);
  w.final_norm = b.vector(R::FinalNorm);
  w.out_res = b.attn_res(R::OutResNorm, R::OutResProj);
  w.layers.resize(c.plan.size());
  for (size_t i = 0; i < c.plan.size(); ++i) {
    const int il = static_cast<int>(i);
    LayerWeights& L = w.layers[i];
    L.spec = c.plan[i];
    L.input_norm = b.vector(R::InputNorm, il);
    L.post_norm = b.vector(R::PostAttnNorm, il);
    L.attn_res = b.attn_res(R::AttnResNorm, R::AttnResProj, il);
    L.ffn_res = b.attn_res(R::MlpResNorm, R::MlpResProj, il);
    if (L.spec.attn == AttnKind::KDA) L.kda = b.kda(il);
    else L.mla = b.mla(il);
    if (L.spec.ffn == FfnKind::Dense) L.dense = b.glu(R::MlpGate, R::MlpUp, R::MlpDown, il);
    else L.moe = b.moe(il);
  }
  return w;
}

namespace {

/// The kind of a trunk matrix slot: quantize_trunk encodes only Quantizable ones; MLA kv_b (read per head
/// as raw BF16) and the routers (BF16 for expert selection, weights.h) are StaysBf16. copy_trunk and
/// mapped_weight_ranges take both kinds.
enum class TrunkSlot { Quantizable, StaysBf16 };

/// Calls f(slot, kind) for each trunk matrix slot of w: the lm_head first, then per layer, in forward
/// order, the attention projections and the dense FFN or the MoE router, latent projections and shared
/// expert. The embedding is not visited (a tied lm_head points at it). A slot may be null (an absent
/// optional matrix). WeightsT is ModelWeights or const ModelWeights.
template <class WeightsT, class F>
void for_each_trunk_matrix(WeightsT& w, F&& f) {
  f(w.lm_head, TrunkSlot::Quantizable);
  for (auto& L : w.layers) {
    if (L.spec.attn == AttnKind::KDA) {
      for (auto* p : {&L.kda.q_proj, &L.kda.k_proj, &L.kda.v_proj, &L.kda.f_a, &L.kda.f_b, &L.kda.b_proj,
                      &L.kda.g_proj, &L.kda.o_proj, &L.kda.o_proj_rows})
        f(*p, TrunkSlot::Quantizable);
    } else {
      for (auto* p : {&L.mla.q_a, &L.mla.q_b, &L.mla.kv_a}) f(*p, TrunkSlot::Quantizable);
      f(L.mla.kv_b, TrunkSlot::StaysBf16);
      for (auto* p : {&L.mla.g_proj, &L.mla.o_proj, &L.mla.o_proj_rows}) f(*p, TrunkSlot::Quantizable);
    }
    auto glu = [&](auto& g) {
      for (auto* p : {&g.gate, &g.up, &g.down, &g.down_rows}) f(*p, TrunkSlot::Quantizable);
    };
    if (L.spec.ffn == FfnKind::Dense) {
      glu(L.dense);
    } else {
      f(L.moe.router, TrunkSlot::StaysBf16);
      f(L.moe.down, TrunkSlot::Quantizable);
      f(L.moe.up, TrunkSlot::Quantizable);
      if (L.moe.shared) glu(*L.moe.shared);
    }
  }
}

}  // namespace

uint64_t quantize_trunk(ModelWeights& w, QuantKind kind, const ProgressFn& progress) {
  std::vector<const TensorView**> slots;
  auto add = [&](const TensorView*& p) {
    if (p && p->dtype == DType::BF16 && p->shape.size() == 2 && p->shape[0] > 0 && p->shape[1] % 32 == 0 && !p->quant)
      slots.push_back(&p);
  };
  for_each_trunk_matrix(w, [&](const TensorView*& p, TrunkSlot slot_kind) {
    if (slot_kind == TrunkSlot::Quantizable && !(w.lm_head_tied && &p == &w.lm_head)) add(p);
  });
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

TrunkCopyStats copy_trunk(ModelWeights& w, bool drop_mapped, const ProgressFn& progress) {
  if (w.trunk_copy.data() != nullptr) throw Error("--trunk-memory copy: the trunk is copied already");
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<const TensorView**> slots;
  auto add = [&](const TensorView*& p) {
    if (p && p->data && p->nbytes > 0 && !p->quant) slots.push_back(&p);
  };
  for_each_trunk_matrix(w, [&](const TensorView*& p, TrunkSlot) { add(p); });
  // one copy per distinct view (a view may fill several slots), laid out in slot order
  std::unordered_map<const TensorView*, size_t> index;
  std::vector<const TensorView*> src;
  std::vector<uint64_t> offset;
  uint64_t total = 0;
  for (const TensorView** s : slots)
    if (index.emplace(*s, src.size()).second) {
      src.push_back(*s);
      total = (total + 63) & ~uint64_t{63};
      offset.push_back(total);
      total += (*s)->nbytes;
    }
  TrunkCopyStats st;
  st.matrices = static_cast<int64_t>(src.size());
  if (src.empty()) return st;
  AnonPages mem(total, true, "--trunk-memory copy");
  std::mutex progress_mu;
  int64_t n_done = 0;
  if (progress) progress("trunk copy", 0, st.matrices);
  // one matrix per task; the first write of each page faults it in as a 2 MiB page
  parallel_for(st.matrices, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const TensorView& t = *src[static_cast<size_t>(i)];
      std::memcpy(mem.data() + offset[static_cast<size_t>(i)], t.data, t.nbytes);
      if (progress) {
        std::lock_guard<std::mutex> lock(progress_mu);
        progress("trunk copy", ++n_done, st.matrices);
      }
    }
  });
  std::vector<const TensorView*> copies(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    TensorView v = *src[i];
    v.data = mem.data() + offset[i];
    w.trunk_copy_views.push_back(std::move(v));
    copies[i] = &w.trunk_copy_views.back();
    st.bytes += src[i]->nbytes;
  }
  for (const TensorView** s : slots) *s = copies[index.at(*s)];
  if (drop_mapped)
    for (const TensorView* t : src)
      if (!(w.lm_head_tied && t == w.embed)) st.paged_out += page_out(t->data, t->nbytes);
  w.trunk_copy = std::move(mem);
  st.huge_bytes = w.trunk_copy.huge_bytes();
  st.memory = std::span<const uint8_t>(w.trunk_copy.data(), total);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

std::vector<std::span<const uint8_t>> mapped_weight_ranges(const ModelWeights& w, IndexRange experts) {
  std::vector<std::span<const uint8_t>> out;
  auto add = [&](const TensorView* p) {
    if (p && p->data && !p->quant && !w.trunk_copy.contains(p->data))
      out.emplace_back(p->data, static_cast<size_t>(p->nbytes));
  };
  auto add_mxfp4 = [&](const Mxfp4Matrix& m) {
    if (m.packed) out.emplace_back(m.packed, static_cast<size_t>(m.rows * (m.cols / 2)));
    if (m.scale) out.emplace_back(m.scale, static_cast<size_t>(m.rows * (m.cols / 32)));
  };
  add(w.embed);
  for_each_trunk_matrix(w, [&](const TensorView* const& p, TrunkSlot) { add(p); });
  for (const LayerWeights& L : w.layers)
    if (L.spec.ffn != FfnKind::Dense && !L.moe.store)
      for (size_t i = 0; i < L.moe.experts.size(); ++i) {
        if (experts.end != 0 && !experts.contains(static_cast<int64_t>(i))) continue;
        const ExpertWeights& e = L.moe.experts[i];
        add_mxfp4(e.w1);
        add_mxfp4(e.w2);
        add_mxfp4(e.w3);
      }
  return out;
}

}  // namespace k3
