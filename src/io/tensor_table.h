// The one K3 tensor table (spec k3-architecture.md §2.1-2.6): every text tensor the model needs,
// with its shape and accepted dtypes, as a function of ModelConfig. It drives checkpoint
// validation (io/checkpoint.cpp), `k3 info` parameter counts (io/model_summary.h) and the test
// fixtures that write checkpoints. Names here never carry the "language_model." prefix.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/config.h"

namespace k3 {

/// Which table a tensor comes from.
enum class TensorGroup {
  Global,    ///< §2.1 embeddings, head, final norm, output AttnRes
  Common,    ///< §2.2 every layer: norms and AttnRes score vectors
  KDA,       ///< §2.3 KDA attention
  MLA,       ///< §2.4 gated MLA attention
  DenseMLP,  ///< §2.5 dense SiTU MLP
  MoE,       ///< §2.6 LatentMoE non-expert: router, bias, latent down/norm/up, shared experts
  Expert,    ///< §2.6 one routed expert matrix (w1 gate, w3 up, w2 down)
};

/// How a tensor is stored.
enum class TensorStorage {
  Plain,  ///< one tensor `name`
  Mxfp4,  ///< "<name>.weight_packed" U8 [rows, cols/2] + "<name>.weight_scale" U8 [rows, cols/32]
          ///< (spec §4); a plain "<name>.weight" in one of `dtypes` is also accepted
};

struct TensorSpec {
  std::string name;             ///< e.g. "model.layers.3.self_attn.q_a_proj.weight"; for Mxfp4
                                ///< the base without ".weight*", e.g. "...experts.7.w1"
  std::vector<int64_t> shape;   ///< logical shape, outermost first (Mxfp4: [rows, cols] of W)
  std::vector<DType> dtypes;    ///< accepted dtypes (first = the published one)
  TensorStorage storage = TensorStorage::Plain;
  TensorGroup group = TensorGroup::Global;
  int il = -1;                  ///< layer (0-indexed), -1 for globals
  int expert = -1;              ///< routed expert id for TensorGroup::Expert
  bool zero_padded = false;     ///< dim 0 may be stored padded to P >= shape[0] with exact zeros
                                ///< (A_log: F32 [128] for 96 heads, spec §2.3)
  int64_t numel() const;        ///< logical parameter count (product of `shape`)
};

/// One tensor as stored in a published checkpoint (name without prefix).
struct StoredTensor {
  std::string name;
  DType dtype = DType::BF16;
  std::vector<int64_t> shape;
};

// --- the table, per layer kind (il = 0-indexed layer) ---
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

/// The published on-disk form of `s`: Plain -> one tensor in dtypes[0] (unpadded shape);
/// Mxfp4 -> the .weight_packed and .weight_scale pair. Throws k3::Error when an Mxfp4 matrix's
/// cols is not a multiple of 32.
std::vector<StoredTensor> stored_tensors(const TensorSpec& s);

/// "model.layers.{il}.block_sparse_moe.experts.{e}.w{1,2,3}" -> true (the only MXFP4 names).
bool is_expert_matrix_base(const std::string& base);

/// Vision tensors (vision_tower.*, mm_projector.*) are skipped by the text engine.
bool is_vision_tensor_name(const std::string& full_name);

/// Prefix of text tensors in the published multimodal checkpoint.
inline constexpr const char* kTextPrefix = "language_model.";

}  // namespace k3
