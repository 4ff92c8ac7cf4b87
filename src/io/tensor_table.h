// The one K3 tensor table (spec k3-architecture.md §2.1-2.6, vision.md §2): every tensor the model needs,
// as one row per tensor kind (TensorRole): its name pattern, its shape as a function of
// ModelConfig, its accepted dtypes, its storage and the config flag that makes it present.
// The rows drive checkpoint validation (io/checkpoint.cpp), the model's bind step
// (model/weights.cpp), the expert store's lookups (io/expert_store.cpp), `k3 info` parameter
// counts (io/model_summary.h), the memory plan's byte split (io/memory_plan.cpp), the expert
// names in LatentMoE's errors (model/latent_moe.cpp), `k3 bench`'s byte estimates, `k3 tensors`
// (the listing the Python tools are tested against) and the test fixtures that write
// checkpoints. Adding or renaming a tensor is one row here.
// Text names here never carry the "language_model." prefix; vision names (vision_tower.*,
// mm_projector.*) are stored without one. The vision rows are present when the config declares a
// tower (ModelConfig::vision) and are listed by vision_tensors(), not by for_each_tensor_spec().
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "io/config.h"

namespace k3 {

/// Which part of the architecture a tensor belongs to (which layers hold it).
enum class TensorGroup {
  Global,       ///< §2.1 embeddings, head, final norm, output AttnRes
  Common,       ///< §2.2 every layer: norms and AttnRes score vectors
  KDA,          ///< §2.3 KDA attention
  MLA,          ///< §2.4 gated MLA attention
  DenseMLP,     ///< §2.5 dense SiTU MLP
  MoE,          ///< §2.6 LatentMoE non-expert: router, bias, latent down/norm/up, shared experts
  Expert,       ///< §2.6 one routed expert matrix (w1 gate, w3 up, w2 down)
  VisionTower,  ///< vision.md §2 the tower's patch embedding, position table and final norm
  VisionBlock,  ///< vision.md §2 one encoder block of the tower ({il} = block index b)
  Projector,    ///< vision.md §2 the mm_projector (patchmergerv2)
};

/// How a tensor is stored.
enum class TensorStorage {
  Plain,  ///< one tensor `name`
  Mxfp4,  ///< "<name>.weight_packed" U8 [rows, cols/2] + "<name>.weight_scale" U8 [rows, cols/32]
          ///< (spec §4). A plain "<name>.weight" in one of `dtypes` is also a valid checkpoint
          ///< (validation and `k3 info` accept it); the model binds routed experts only as MXFP4
          ///< (bind_weights refuses the plain form with an error naming the tensor).
};

/// One tensor kind: a row of the table. Symbols in the shape comments: D hidden_size,
/// V vocab_size, H kda_num_heads, d kda_head_dim, C = H·d, K short_conv_kernel_size,
/// Hm num_attention_heads, qr q_lora_rank, kvr kv_lora_rank, dn/dr/dv qk_nope/qk_rope/v head dims,
/// I intermediate_size, E num_experts, L routed_expert_hidden_size, Im moe_intermediate_size,
/// S = num_shared_experts·Im.
enum class TensorRole : uint8_t {
  // §2.1 globals
  EmbedTokens,  ///< model.embed_tokens.weight            BF16 [V, D]
  LmHead,       ///< lm_head.weight                       BF16 [V, D]; absent when tie_word_embeddings
  FinalNorm,    ///< model.norm.weight                    BF16 [D]
  OutResNorm,   ///< model.output_attn_res_norm.weight    BF16 [D]
  OutResProj,   ///< model.output_attn_res_proj.weight    BF16 [1, D]
  // §2.2 every layer (prefix model.layers.{il}.)
  InputNorm,     ///< input_layernorm.weight               BF16 [D]
  PostAttnNorm,  ///< post_attention_layernorm.weight      BF16 [D]
  AttnResNorm,   ///< self_attention_res_norm.weight       BF16 [D]
  AttnResProj,   ///< self_attention_res_proj.weight       BF16 [1, D]
  MlpResNorm,    ///< mlp_res_norm.weight                  BF16 [D]
  MlpResProj,    ///< mlp_res_proj.weight                  BF16 [1, D]
  // §2.3 KDA (prefix model.layers.{il}.self_attn.)
  KdaQProj,   ///< q_proj.weight                        BF16 [C, D]
  KdaKProj,   ///< k_proj.weight                        BF16 [C, D]
  KdaVProj,   ///< v_proj.weight                        BF16 [C, D]
  KdaQConv,   ///< q_conv1d.weight                      F32 [C, 1, K]
  KdaKConv,   ///< k_conv1d.weight                      F32 [C, 1, K]
  KdaVConv,   ///< v_conv1d.weight                      F32 [C, 1, K]
  KdaFA,      ///< f_a_proj.weight                      BF16 [d, D]
  KdaFB,      ///< f_b_proj.weight                      BF16 [C, d]
  KdaBProj,   ///< b_proj.weight                        BF16 [H, D]
  KdaGProj,   ///< g_proj.weight                        BF16 [C, D]
  KdaDtBias,  ///< dt_bias                              F32 [C]
  KdaALog,    ///< A_log                                F32 [H], may be zero-padded along dim 0
  KdaONorm,   ///< o_norm.weight                        F32 [d]
  KdaOProj,   ///< o_proj.weight                        BF16 [D, C]
  // §2.4 MLA (prefix model.layers.{il}.self_attn.)
  MlaQA,       ///< q_a_proj.weight                      BF16 [qr, D]
  MlaQANorm,   ///< q_a_layernorm.weight                 BF16 [qr]
  MlaQB,       ///< q_b_proj.weight                      BF16 [Hm·(dn+dr), qr]
  MlaKvA,      ///< kv_a_proj_with_mqa.weight            BF16 [kvr+dr, D]
  MlaKvANorm,  ///< kv_a_layernorm.weight                BF16 [kvr]
  MlaKvB,      ///< kv_b_proj.weight                     BF16 [Hm·(dn+dv), kvr]
  MlaGProj,    ///< g_proj.weight                        BF16 [Hm·dv, D]; when mla_use_output_gate
  MlaOProj,    ///< o_proj.weight                        BF16 [D, Hm·dv]
  // §2.5 dense MLP (prefix model.layers.{il}.mlp.)
  MlpGate,  ///< gate_proj.weight                     BF16 [I, D]
  MlpUp,    ///< up_proj.weight                       BF16 [I, D]
  MlpDown,  ///< down_proj.weight                     BF16 [D, I]
  // §2.6 LatentMoE (prefix model.layers.{il}.block_sparse_moe.)
  MoeRouter,      ///< gate.weight                          BF16 [E, D]
  MoeRouterBias,  ///< gate.e_score_correction_bias         F32 [E]
  MoeLatentDown,  ///< routed_expert_down_proj.weight       BF16 [L, D]
  MoeLatentNorm,  ///< routed_expert_norm.weight            BF16 [L]; when latent_moe_use_norm
  MoeLatentUp,    ///< routed_expert_up_proj.weight         BF16 [D, L]
  SharedGate,     ///< shared_experts.gate_proj.weight      BF16 [S, D]; when S > 0
  SharedUp,       ///< shared_experts.up_proj.weight        BF16 [S, D]; when S > 0
  SharedDown,     ///< shared_experts.down_proj.weight      BF16 [D, S]; when S > 0
  // §2.6 routed expert {e} (prefix model.layers.{il}.block_sparse_moe.experts.{e}.), MXFP4
  ExpertW1,  ///< w1 (gate)                            [Im, L]
  ExpertW2,  ///< w2 (down)                            [L, Im]
  ExpertW3,  ///< w3 (up)                              [Im, L]
  // vision.md §2 vision tower (prefix vision_tower.; symbols of io/vision_config.h: Dv, A, Iv,
  // Hpe, Wpe, p, Dp, Dt), present when the config declares a tower
  VisionPatchEmbed,  ///< patch_embed.proj.weight           BF16 [Dv, 3, p, p]
  VisionPosEmb,      ///< patch_embed.pos_emb.weight        BF16 [Hpe, Wpe, Dv]
  VisionNorm0,       ///< encoder.blocks.{il}.norm0.weight  BF16 [Dv]
  VisionWqkv,        ///< encoder.blocks.{il}.wqkv.weight   BF16 [3·A, Dv]
  VisionWo,          ///< encoder.blocks.{il}.wo.weight     BF16 [Dv, A]
  VisionNorm1,       ///< encoder.blocks.{il}.norm1.weight  BF16 [Dv]
  VisionFc0,         ///< encoder.blocks.{il}.mlp.fc0.weight BF16 [Iv, Dv]
  VisionFc1,         ///< encoder.blocks.{il}.mlp.fc1.weight BF16 [Dv, Iv]
  VisionFinalNorm,   ///< encoder.final_layernorm.weight    BF16 [Dv]
  // vision.md §2 projector (prefix mm_projector.)
  ProjectorFc0,       ///< proj.0.weight                    BF16 [Dp, Dp]
  ProjectorFc2,       ///< proj.2.weight                    BF16 [Dt, Dp]
  ProjectorPostNorm,  ///< post_norm.weight                 BF16 [Dt]
};

/// Number of TensorRole values (the rows of the table).
inline constexpr int kTensorRoleCount = static_cast<int>(TensorRole::ProjectorPostNorm) + 1;

/// One row of the table, independent of the config.
struct TensorKind {
  TensorRole role;
  const char* id;  ///< stable identifier, e.g. "kda.q_proj" (`k3 tensors` prints it)
  TensorGroup group;
  std::string pattern;        ///< name with "{il}" (layer) and "{e}" (expert) placeholders; for
                              ///< Mxfp4 the base without ".weight*"
  std::vector<DType> dtypes;  ///< accepted dtypes (first = the published one)
  TensorStorage storage = TensorStorage::Plain;
  bool zero_padded = false;  ///< dim 0 may be stored padded to P >= shape[0] with exact zeros
  const char* when = "";     ///< the config condition for presence ("" = always), for listings
  /// Logical shape, outermost first (Mxfp4: [rows, cols] of the matrix).
  std::vector<int64_t> (*shape)(const ModelConfig&) = nullptr;
  /// Presence in `c` (nullptr = always); matches `when`.
  bool (*present)(const ModelConfig&) = nullptr;
};

struct TensorSpec {
  std::string name;            ///< e.g. "model.layers.3.self_attn.q_a_proj.weight"; for Mxfp4
                               ///< the base without ".weight*", e.g. "...experts.7.w1"
  std::vector<int64_t> shape;  ///< logical shape, outermost first (Mxfp4: [rows, cols] of W)
  std::vector<DType> dtypes;   ///< accepted dtypes (first = the published one)
  TensorStorage storage = TensorStorage::Plain;
  TensorGroup group = TensorGroup::Global;
  TensorRole role = TensorRole::EmbedTokens;
  int il = -1;               ///< layer (0-indexed), -1 for globals
  int expert = -1;           ///< routed expert id for TensorGroup::Expert
  bool zero_padded = false;  ///< dim 0 may be stored padded to P >= shape[0] with exact zeros
                             ///< (A_log: F32 [128] for 96 heads, spec §2.3)
  int64_t numel() const;     ///< logical parameter count (product of `shape`)
  /// The one acceptance rule for a stored plain tensor (validation and binding): dtype is one of
  /// `dtypes`; shape equals `shape`, or when zero_padded has the same rank and trailing dims and
  /// dim 0 >= shape[0] (the padding's zeros are checked by the validator, which reads bytes).
  bool accepts_dtype(DType dt) const;
  bool accepts_shape(const std::vector<int64_t>& stored_shape) const;
};

/// One tensor as stored in a published checkpoint (name without prefix).
struct StoredTensor {
  std::string name;
  DType dtype = DType::BF16;
  std::vector<int64_t> shape;
};

/// Every row, in table order (TensorRole order).
std::span<const TensorKind> tensor_kinds();
/// The row of `role`.
const TensorKind& tensor_kind(TensorRole role);
/// True when `c` has tensors of kind `role` (lm_head when untied, MLA g_proj when
/// mla_use_output_gate, ...; the layer kind is not considered here).
bool tensor_present(const ModelConfig& c, TensorRole role);

/// The tensor of kind `role` in layer `il` (expert `expert` for TensorGroup::Expert): name,
/// logical shape from `c`, dtypes, storage. Globals take il = -1. Throws k3::Error when the role
/// is absent in `c` (tensor_present false), when `il` is outside [0, num_hidden_layers) for a
/// layer role (or not -1 for a global), when the layer's plan has no such tensor (a KDA role on an
/// MLA layer, ...) or when `expert` is outside [0, num_experts) for an expert role.
TensorSpec tensor_spec(const ModelConfig& c, TensorRole role, int il = -1, int expert = -1);

/// The name (no prefix) of the tensor of kind `role` in layer `il`, expert `expert`: the row's
/// pattern with {il} and {e} filled in (for Mxfp4 kinds the base without ".weight*"), e.g.
/// tensor_name(TensorRole::ExpertW2, 3, 7) = "model.layers.3.block_sparse_moe.experts.7.w2".
/// Names only: nothing is checked against a config (tensor_spec does that).
std::string tensor_name(TensorRole role, int il = -1, int expert = -1);

/// `full_name` without the leading kTextPrefix, when it has one.
std::string_view text_tensor_name(std::string_view full_name);

/// A text tensor name (no prefix) matched against the table's patterns.
struct TensorNameMatch {
  TensorRole role;
  int il = -1;              ///< -1 for globals
  int expert = -1;          ///< -1 unless an expert role
  std::string_view suffix;  ///< for Mxfp4 kinds: ".weight_packed", ".weight_scale", ".weight" or
                            ///< "" (the bare base); empty for Plain kinds
};
/// The row of `c` whose pattern `name` follows ({il}/{e} match decimal digits) and whose tensor
/// `c` holds: the layer exists and its plan has the row's group (KDA and MLA share the names
/// "self_attn.g_proj.weight" and "self_attn.o_proj.weight"; the plan decides), the row is
/// present, the expert id is in range. nullopt otherwise.
std::optional<TensorNameMatch> match_tensor_name(const ModelConfig& c, std::string_view name);

// --- the table, per layer kind (il = 0-indexed layer), rows present in `c`, in table order ---
std::vector<TensorSpec> global_tensors(const ModelConfig& c);
std::vector<TensorSpec> common_layer_tensors(const ModelConfig& c, int il);
std::vector<TensorSpec> kda_tensors(const ModelConfig& c, int il);
std::vector<TensorSpec> mla_tensors(const ModelConfig& c, int il);
std::vector<TensorSpec> dense_mlp_tensors(const ModelConfig& c, int il);
/// LatentMoE tensors other than the routed experts.
std::vector<TensorSpec> moe_tensors(const ModelConfig& c, int il);
/// Routed expert `e` of layer `il`: w1 [moe_inter, latent], w2 [latent, moe_inter], w3 [moe_inter, latent].
std::vector<TensorSpec> expert_tensors(const ModelConfig& c, int il, int e);
/// Everything layer `il` holds per the plan (common + attention + FFN incl. every expert).
std::vector<TensorSpec> layer_tensors(const ModelConfig& c, int il);
/// Every text tensor of the model, globals first, then layers 0..L-1 (experts in id order).
void for_each_tensor_spec(const ModelConfig& c, const std::function<void(const TensorSpec&)>& fn);

/// The vision tower's and projector's tensors (vision.md §2) in forward order: patch embedding,
/// position table, blocks 0..num_layers-1 (norm0, wqkv, wo, norm1, fc0, fc1), final norm, then
/// the projector (proj.0, proj.2, post_norm): 3 + 6·num_layers + 3 specs (K3: 168). Empty when
/// `c` declares no tower. Checkpoint::open validates them like the text tensors.
std::vector<TensorSpec> vision_tensors(const ModelConfig& c);

/// The published on-disk form of `s`: Plain -> one tensor in dtypes[0] (unpadded shape);
/// Mxfp4 -> the .weight_packed and .weight_scale pair. Throws k3::Error when an Mxfp4 matrix's
/// cols is not a multiple of 32.
std::vector<StoredTensor> stored_tensors(const TensorSpec& s);

/// "model.layers.{il}.block_sparse_moe.experts.{e}.w{1,2,3}" -> true (the only MXFP4 names).
bool is_expert_matrix_base(const std::string& base);

/// A vision tensor name (vision_tower.*, mm_projector.*): the text engine never reads these; with a
/// declared tower (ModelConfig::vision) they are validated against vision_tensors().
bool is_vision_tensor_name(const std::string& full_name);

/// Prefix of text tensors in the published multimodal checkpoint.
inline constexpr const char* kTextPrefix = "language_model.";

}  // namespace k3
