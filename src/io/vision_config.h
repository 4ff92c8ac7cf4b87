// VisionConfig: the `vision_config` object of K3's config.json (shared spec vision.md §1.1), the
// MoonViT-V2 vision tower and its `patchmergerv2` projector, parsed and validated. Every tower
// dimension comes from here (the tensor table's vision rows and the tower read it).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace k3 {

/// Epsilon of the tower's RMSNorms (norm0, norm1, final_layernorm): FLT_EPSILON = 2^-23, PyTorch's
/// default for `nn.RMSNorm` built without an eps on fp32/bf16 input (vision.md §4.4, §7 trap 4).
inline constexpr float kVisionNormEps = 1.1920928955078125e-07f;
/// RoPE base of the 2D rotary embedding (vision.md §4.3).
inline constexpr double kVisionRopeTheta = 10000.0;
/// Side of the 2D RoPE table: grids up to 512 x 512 patches (vision.md §3.2, §4.3).
inline constexpr int64_t kVisionRopeMaxGrid = 512;

/// One vision tower. Symbols: Dv hidden_size, Hv num_heads, dh = head_dim(), A = qkv_hidden_size =
/// Hv·dh, Iv intermediate_size, (Hpe, Wpe) the learned position table, p patch_size,
/// Dp = merged_width() the projector input, Dt text_hidden_size (= the text model's hidden_size).
struct VisionConfig {
  int patch_size = 14;          ///< p, `patch_size` (must be 14: the preprocessing's patches)
  int hidden_size = 0;          ///< Dv, `vt_hidden_size` (K3: 1024)
  int num_layers = 0;           ///< `vt_num_hidden_layers` (K3: 27)
  int num_heads = 0;            ///< Hv, `vt_num_attention_heads` (K3: 12)
  int qkv_hidden_size = 0;      ///< A, `qkv_hidden_size` (K3: 1536; absent: Dv)
  int intermediate_size = 0;    ///< Iv, `vt_intermediate_size` (K3: 4096)
  int pos_emb_height = 0;       ///< Hpe, `init_pos_emb_height` (K3: 64)
  int pos_emb_width = 0;        ///< Wpe, `init_pos_emb_width` (K3: 64)
  int merge_h = 2;              ///< `merge_kernel_size`[0] (must be 2)
  int merge_w = 2;              ///< `merge_kernel_size`[1] (must be 2)
  int mm_hidden_size = 0;       ///< `mm_hidden_size` (K3: 1024; must equal Dv)
  int text_hidden_size = 0;     ///< Dt, `text_hidden_size` (K3: 7168; must equal the text hidden_size)
  float projector_eps = 1e-5f;  ///< `projector_ln_eps`, the projector post-norm's epsilon

  int head_dim() const { return num_heads > 0 ? qkv_hidden_size / num_heads : 0; }      ///< dh (K3: 128)
  int64_t merged_width() const { return int64_t{merge_h} * merge_w * mm_hidden_size; }  ///< Dp (K3: 4096)
};

/// What the `vision_config` key of a config.json holds.
enum class VisionConfigKind {
  Absent,       ///< no `vision_config`: a text-only checkpoint
  Placeholder,  ///< a `vision_config` without `vt_hidden_size` (e.g. the tiny test and K3-mini
                ///< configs' stand-in): no tower is declared; the checkpoint is text-only
  Tower,        ///< a MoonViT-V2 tower (`vt_hidden_size` present): every key below is checked
};

/// Parses `vision_config` of the top-level config object `top` (`origin` names the file in
/// errors). Returns nullopt for Absent and Placeholder (`kind` tells which). For a tower:
/// required integer keys vt_hidden_size, vt_num_hidden_layers, vt_num_attention_heads,
/// vt_intermediate_size, init_pos_emb_height, init_pos_emb_width, mm_hidden_size,
/// text_hidden_size, patch_size, merge_kernel_size ([2, 2] or 2); optional qkv_hidden_size,
/// projector_ln_eps. Keys naming a variant the engine does not compute are refused unless they
/// hold K3's value (norm_type "rmsnorm", attn_bias / linear_bias / patch_embed_proj_bias false,
/// mlp_type "mlp2", activation_func "gelu_pytorch_tanh", pos_emb_type "divided_fixed",
/// pos_emb_interpolation_mode "bilinear", merge_type "sd2_tpool", mm_projector_type
/// "patchmergerv2"). Errors (k3::Error naming `origin` and the key "vision_config.<key>"): a
/// missing or mistyped key, a refused value, a non-positive dimension, qkv_hidden_size not a
/// multiple of vt_num_attention_heads, a head dim not a multiple of 4 (the 2D RoPE rotates 4
/// dims per frequency, vision.md §4.3), patch_size other than 14, mm_hidden_size != vt_hidden_size,
/// text_hidden_size != `text_hidden` (the text model's hidden_size; vision.md §1.1).
std::optional<VisionConfig> parse_vision_config(const nlohmann::json& top, const std::string& origin, int text_hidden,
                                                VisionConfigKind* kind = nullptr);

}  // namespace k3
