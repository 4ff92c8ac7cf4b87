// ModelConfig and LayerPlan: K3's config.json (spec k3-architecture.md §1, §6.1) parsed and
// validated. Every dimension the engine uses comes from here; nothing is a compile-time cap.
#pragma once
#include <filesystem>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/vision_config.h"

namespace k3 {

enum class AttnKind { KDA, MLA };
enum class FfnKind { Dense, LatentMoE };

/// One decoder layer of the plan (0-indexed `il`).
struct LayerSpec {
  int il = 0;
  AttnKind attn = AttnKind::KDA;
  FfnKind ffn = FfnKind::Dense;
  bool snapshot = false;  ///< AttnRes: il % attn_res_block_size == 0 (bank.push before attention)
};

struct ModelConfig {
  // --- identity (top level) ---
  std::string architecture;  ///< top-level architectures[0], e.g. "KimiK3ForConditionalGeneration"
  std::string model_type;    ///< top-level model_type, e.g. "kimi_k3"
  bool wrapped = false;      ///< true when the text model sits under "text_config"
  // --- trunk ---
  int hidden_size = 0;         ///< D (7168)
  int num_hidden_layers = 0;   ///< 93
  int vocab_size = 0;          ///< 163840
  float rms_norm_eps = 1e-6f;  ///< default 1e-6 when absent (Moonshot code); K3 sets 1e-5
  float mla_norm_eps = 1e-6f;  ///< q_a/kv_a layernorm eps: KimiRMSNorm default (spec §3.3)
  bool tie_word_embeddings = false;
  int attn_res_block_size = 0;  ///< 12; 0 = no AttnRes (refused: K3 requires it)
  int bos_token_id = -1, eos_token_id = -1, pad_token_id = -1;
  int64_t max_position_embeddings = 0;  ///< 1048576 (informational; 0 when absent)
  int num_nextn_predict_layers = 0;     ///< MTP layers; must be 0 (K3 ships none)
  // --- MLA ---
  int num_attention_heads = 0;  ///< 96
  int q_lora_rank = 0;          ///< 1536
  int kv_lora_rank = 0;         ///< 512
  int qk_nope_head_dim = 0;     ///< 128
  int qk_rope_head_dim = 0;     ///< 64 (never rotated: NoPE)
  int v_head_dim = 0;           ///< 128
  bool mla_use_nope = false;
  bool mla_use_output_gate = false;
  // --- FFN / MoE ---
  std::string hidden_act = "silu";        ///< "situ" for K3
  float situ_beta = 1.0f;                 ///< activation_situ_beta
  std::optional<float> situ_linear_beta;  ///< activation_situ_linear_beta (absent: up branch untransformed)
  int intermediate_size = 0;              ///< dense MLP width (33792)
  int first_k_dense_replace = 0;
  int moe_layer_freq = 1;
  int num_experts = 0;                ///< 896
  int num_experts_per_token = 0;      ///< top-k, 16
  int num_shared_experts = 0;         ///< 2 -> one fused MLP of width num_shared_experts*moe_intermediate_size
  int moe_intermediate_size = 0;      ///< 3072
  int routed_expert_hidden_size = 0;  ///< latent width 3584
  bool latent_moe_use_norm = false;
  std::string moe_router_activation_func = "sigmoid";
  bool moe_renormalize = true;
  float routed_scaling_factor = 1.0f;
  int num_expert_group = 1, topk_group = 1;
  // --- KDA (linear_attn_config) ---
  std::vector<int> kda_layers;            ///< 1-indexed, as in the file
  std::vector<int> full_attn_layers;      ///< 1-indexed, as in the file
  int kda_num_heads = 0;                  ///< 96
  int kda_head_dim = 0;                   ///< 128
  int short_conv_kernel_size = 0;         ///< 4
  std::optional<float> gate_lower_bound;  ///< -5 (K3 gate); absent = Kimi-Linear gate
  bool use_full_rank_gate = false;
  // --- quantization (informational; quantized tensors are found from the header, spec §1.4) ---
  std::string quant_method;  ///< "compressed-tensors" or ""
  std::string quant_format;  ///< "mxfp4-pack-quantized" or ""
  int quant_group_size = 0;  ///< 32

  // --- vision (top-level `vision_config`, io/vision_config.h) ---
  std::optional<VisionConfig> vision;                       ///< the vision tower; nullopt = text-only
  VisionConfigKind vision_kind = VisionConfigKind::Absent;  ///< what `vision_config` held

  /// Derived layer plan, size num_hidden_layers.
  std::vector<LayerSpec> plan;

  // --- derived helpers (from `plan`) ---
  int n_kda_layers() const;                    ///< layers with attn == KDA (69 for K3)
  int n_mla_layers() const;                    ///< layers with attn == MLA (24)
  int n_moe_layers() const;                    ///< layers with ffn == LatentMoE (92)
  std::vector<int> mla_layer_indices() const;  ///< 0-indexed, ascending
};

/// Parses config.json (wrapper with text_config, or flat text config).
/// Throws k3::Error naming the file and key on a missing key, wrong type, unknown architecture
/// or inconsistent dimensions.
ModelConfig load_config(const std::filesystem::path& config_json);
/// Same, from a JSON string (`origin` is used in error messages). Besides the dimensions it
/// refuses keys K3 defines but the engine does not honour unless they hold K3's value
/// (topk_method "noaux_tc"; quantization quant_method "compressed-tensors", format
/// "mxfp4-pack-quantized", group_size 32, num_bits 4), an explicit bos/eos/pad_token_id outside
/// [0, vocab_size) and an explicit max_position_embeddings <= 0.
ModelConfig parse_config(const std::string& json_text, const std::string& origin);

/// bos_token_id / eos_token_id against the tokenizer's id count (which may be below vocab_size:
/// the embedding is padded): k3::Error naming `origin` and the key when an id has no token.
void check_config_token_ids(const ModelConfig& c, int32_t n_tokenizer_ids, const std::string& origin);

}  // namespace k3
