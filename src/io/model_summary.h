// Numbers `k3 info` prints, computed from the tensor table (io/tensor_table.h) and the opened
// checkpoint: parameter counts (total / active per token, spec §0 and algorithms.md §8), bytes per
// dtype, per-sequence state sizes, and a compact rendering of the layer plan.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "core/dtype.h"
#include "core/mla_cache_type.h"
#include "io/checkpoint.h"
#include "io/config.h"

namespace k3 {

/// Logical parameter counts (an MXFP4 matrix [rows, cols] counts rows*cols parameters).
struct ParamCounts {
  int64_t embedding = 0;       ///< embed_tokens
  int64_t lm_head = 0;         ///< 0 when tied
  int64_t attention_kda = 0;   ///< all KDA tensors (projections, conv taps, gates, A_log, norms)
  int64_t attention_mla = 0;   ///< all MLA tensors
  int64_t dense_mlp = 0;       ///< dense SiTU MLPs
  int64_t moe_shared = 0;      ///< shared experts
  int64_t moe_latent = 0;      ///< routed_expert_down_proj / norm / up_proj
  int64_t moe_router = 0;      ///< gate.weight + e_score_correction_bias
  int64_t routed_experts = 0;  ///< all routed experts of all MoE layers
  int64_t routed_active = 0;   ///< top-k routed experts of all MoE layers
  int64_t norms_attn_res = 0;  ///< per-layer norms + AttnRes vectors + final norm/output AttnRes
  int64_t total = 0;           ///< sum of all of the above (except routed_active)
  /// Per token: everything except the embedding table and the (num_experts - top_k) routed
  /// experts not selected (an embedding row lookup is not a matmul). K3: ~104.2e9.
  int64_t active = 0;
};
ParamCounts count_params(const ModelConfig& c);

/// Per-sequence state held by this engine (all fp32, spec §3.2 / §3.3).
struct StateBytes {
  uint64_t kda_recurrent_per_layer = 0;  ///< kda_num_heads * head_dim * head_dim * 4
  uint64_t kda_conv_per_layer = 0;       ///< (K-1) * 3 * (heads*head_dim) * 4 (raw q,k,v history)
  uint64_t kda_total = 0;                ///< (recurrent + conv) * n_kda_layers; constant in tokens
  uint64_t mla_per_token_per_layer = 0;  ///< one cache row: mla_cache_row_bytes (f32: (kv_lora_rank + qk_rope_head_dim) * 4)
  uint64_t mla_per_token = 0;            ///< * n_mla_layers
  /// n_tokens * mla_per_token. Throws k3::Error naming -c when n_tokens < 0 or the product
  /// does not fit in 64 bits (overflow-checked: no wrap-around).
  uint64_t mla_bytes(int64_t n_tokens) const;
  /// kda_total + n_tokens * mla_per_token; overflow-checked as mla_bytes().
  uint64_t total(int64_t n_tokens) const;
};
/// The state sizes of `c` with MLA cache rows stored as `mla_cache` (core/mla_cache_type.h).
StateBytes state_bytes(const ModelConfig& c, MlaCacheType mla_cache = MlaCacheType::F32);

/// What an opened checkpoint holds.
struct CheckpointStats {
  int shard_count = 0;
  int64_t n_tensors = 0, n_text = 0, n_vision = 0;
  uint64_t text_bytes = 0, vision_bytes = 0;
  std::map<DType, uint64_t> text_bytes_by_dtype;
  std::map<DType, int64_t> text_tensors_by_dtype;
};
CheckpointStats checkpoint_stats(const Checkpoint& ck);
/// What a complete published checkpoint of config `c` would hold, from the tensor table alone
/// (io/tensor_table.h, each tensor in its published dtype and unpadded shape): for `k3 info` on
/// a directory with config.json but no shards. Text tensors only; shard_count = 0.
CheckpointStats published_text_stats(const ModelConfig& c);

/// The vision tower and projector of `c` as published (vision.md §2, from the tensor table's
/// vision rows, BF16): n_tensors = n_vision (K3: 168) and vision_bytes (K3: 894,717,952); all
/// zero when `c` declares no tower.
CheckpointStats published_vision_stats(const ModelConfig& c);

/// Multi-line layer plan: one row per AttnRes block ("K"/"M" attention, "d" suffix = dense FFN).
std::string format_layer_plan(const ModelConfig& c);

}  // namespace k3
