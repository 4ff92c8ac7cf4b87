// The vision tower's and projector's tensors (shared spec vision.md §2) bound from a checkpoint
// through the tensor table's vision rows (io/tensor_table.h: vision_tensors, tensor_spec), checked
// with the table's acceptance rule. Matrices stay in the mapped shards (BF16 views read by the
// GEMM kernels); norm weights and the position table are decoded to fp32 once.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "io/checkpoint.h"
#include "io/vision_config.h"

namespace k3::vision {

/// One encoder block (vision.md §4.4); Dv, A, Iv as in io/vision_config.h.
struct VisionBlockWeights {
  std::vector<float> norm0;          ///< [Dv]
  const TensorView* wqkv = nullptr;  ///< BF16 [3·A, Dv]: q rows 0..A−1, k A..2A−1, v 2A..3A−1
  const TensorView* wo = nullptr;    ///< BF16 [Dv, A]
  std::vector<float> norm1;          ///< [Dv]
  const TensorView* fc0 = nullptr;   ///< BF16 [Iv, Dv]
  const TensorView* fc1 = nullptr;   ///< BF16 [Dv, Iv]
};

struct VisionWeights {
  VisionConfig config;
  TensorView patch_embed;                  ///< BF16 [Dv, 3·p·p]: the stored [Dv, 3, p, p] conv weight viewed
                                           ///< as a Linear weight (same bytes, 2-D for the GEMM kernels)
  std::vector<float> pos_emb;              ///< [Hpe, Wpe, Dv]
  std::vector<VisionBlockWeights> blocks;  ///< [num_layers]
  std::vector<float> final_norm;           ///< [Dv]
  const TensorView* proj0 = nullptr;       ///< BF16 [Dp, Dp] mm_projector.proj.0
  const TensorView* proj2 = nullptr;       ///< BF16 [Dt, Dp] mm_projector.proj.2
  std::vector<float> post_norm;            ///< [Dt] mm_projector.post_norm
};

/// Binds the tower of `ck`. Errors (k3::Error): "<dir> has no vision tower (no vision_config in
/// config.json)" (or "(vision_config in config.json is a placeholder without vt_hidden_size)")
/// for a text-only checkpoint; a missing tensor or one the table's rule refuses (naming it, the
/// expected and the found dtype/shape).
VisionWeights bind_vision_weights(const Checkpoint& ck);

}  // namespace k3::vision
