#include "io/model_summary.h"

#include <algorithm>
#include <cstdio>

#include "core/checked_math.h"
#include "core/error.h"
#include "io/tensor_table.h"

namespace k3 {

uint64_t StateBytes::mla_bytes(int64_t n_tokens) const {
  if (n_tokens < 0) throw Error("-c/--ctx: expected a token count >= 0, found " + std::to_string(n_tokens));
  const auto b = checked_mul(static_cast<uint64_t>(n_tokens), mla_per_token);
  if (!b)
    throw Error("-c/--ctx: the MLA cache for " + std::to_string(n_tokens) + " tokens (" +
                std::to_string(mla_per_token) + " bytes per token) exceeds 2^64 bytes");
  return *b;
}

uint64_t StateBytes::total(int64_t n_tokens) const {
  const auto t = checked_add(kda_total, mla_bytes(n_tokens));
  if (!t) throw Error("-c/--ctx: the state for " + std::to_string(n_tokens) + " tokens exceeds 2^64 bytes");
  return *t;
}

ParamCounts count_params(const ModelConfig& c) {
  ParamCounts p;
  for_each_tensor_spec(c, [&](const TensorSpec& s) {
    const int64_t n = s.numel();
    switch (s.group) {
      case TensorGroup::Global:
        if (s.role == TensorRole::EmbedTokens) p.embedding += n;
        else if (s.role == TensorRole::LmHead) p.lm_head += n;
        else p.norms_attn_res += n;
        break;
      case TensorGroup::Common: p.norms_attn_res += n; break;
      case TensorGroup::KDA: p.attention_kda += n; break;
      case TensorGroup::MLA: p.attention_mla += n; break;
      case TensorGroup::DenseMLP: p.dense_mlp += n; break;
      case TensorGroup::MoE:
        if (s.role == TensorRole::SharedGate || s.role == TensorRole::SharedUp || s.role == TensorRole::SharedDown)
          p.moe_shared += n;
        else if (s.role == TensorRole::MoeRouter || s.role == TensorRole::MoeRouterBias) p.moe_router += n;
        else p.moe_latent += n;
        break;
      case TensorGroup::Expert:
        p.routed_experts += n;
        if (s.expert < c.num_experts_per_token) p.routed_active += n;  // every expert has the same size
        break;
      case TensorGroup::VisionTower:
      case TensorGroup::VisionBlock:
      case TensorGroup::Projector: break;  // not text tensors: for_each_tensor_spec never lists them
    }
  });
  p.total = p.embedding + p.lm_head + p.attention_kda + p.attention_mla + p.dense_mlp + p.moe_shared + p.moe_latent +
            p.moe_router + p.routed_experts + p.norms_attn_res;
  p.active = p.total - p.embedding - (p.routed_experts - p.routed_active);
  return p;
}

StateBytes state_bytes(const ModelConfig& c, MlaCacheType mla_cache) {
  StateBytes s;
  const uint64_t H = static_cast<uint64_t>(c.kda_num_heads), d = static_cast<uint64_t>(c.kda_head_dim);
  const uint64_t K = static_cast<uint64_t>(c.short_conv_kernel_size);
  s.kda_recurrent_per_layer = H * d * d * 4;
  s.kda_conv_per_layer = (K - 1) * 3 * H * d * 4;
  s.kda_total = (s.kda_recurrent_per_layer + s.kda_conv_per_layer) * static_cast<uint64_t>(c.n_kda_layers());
  s.mla_per_token_per_layer = static_cast<uint64_t>(mla_cache_row_bytes(mla_cache, c.kv_lora_rank, c.qk_rope_head_dim));
  s.mla_per_token = s.mla_per_token_per_layer * static_cast<uint64_t>(c.n_mla_layers());
  return s;
}

CheckpointStats checkpoint_stats(const Checkpoint& ck) {
  CheckpointStats st;
  st.shard_count = ck.shard_count();
  for (const auto& t : ck.tensors()) {
    ++st.n_tensors;
    if (is_vision_tensor_name(t.name)) {
      ++st.n_vision;
      st.vision_bytes += t.nbytes;
    } else {
      ++st.n_text;
      st.text_bytes += t.nbytes;
      st.text_bytes_by_dtype[t.dtype] += t.nbytes;
      ++st.text_tensors_by_dtype[t.dtype];
    }
  }
  return st;
}

CheckpointStats published_text_stats(const ModelConfig& c) {
  CheckpointStats st;
  for_each_tensor_spec(c, [&](const TensorSpec& spec) {
    for (const StoredTensor& t : stored_tensors(spec)) {
      uint64_t n = dtype_size(t.dtype);
      for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
      ++st.n_tensors;
      ++st.n_text;
      st.text_bytes += n;
      st.text_bytes_by_dtype[t.dtype] += n;
      ++st.text_tensors_by_dtype[t.dtype];
    }
  });
  return st;
}

CheckpointStats published_vision_stats(const ModelConfig& c) {
  CheckpointStats st;
  for (const TensorSpec& spec : vision_tensors(c))
    for (const StoredTensor& t : stored_tensors(spec)) {
      uint64_t n = dtype_size(t.dtype);
      for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
      ++st.n_tensors;
      ++st.n_vision;
      st.vision_bytes += n;
    }
  return st;
}

std::string format_layer_plan(const ModelConfig& c) {
  std::string r;
  const int B = c.attn_res_block_size > 0 ? c.attn_res_block_size : 12;
  for (size_t i = 0; i < c.plan.size(); ++i) {
    const LayerSpec& l = c.plan[i];
    if (l.il % B == 0) {
      if (!r.empty()) r += "\n";
      const int last = std::min<int>(l.il + B - 1, c.num_hidden_layers - 1);
      char head[32];
      std::snprintf(head, sizeof head, "  %3d-%-3d |", l.il, last);
      r += head;
    }
    r += ' ';
    r += l.attn == AttnKind::KDA ? 'K' : 'M';
    r += l.ffn == FfnKind::Dense ? 'd' : ' ';
  }
  return r;
}

}  // namespace k3
