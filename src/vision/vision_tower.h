// The MoonViT-V2 vision tower and its projector (shared spec vision.md §4-§5, §8.1): a batch of
// preprocessed images (ImagePatches) -> image-token embeddings [n_tokens, Dt] in the text model's
// hidden space. fp32 activations on the text model's kernels (kernels/ops.h BF16 GEMMs on the
// mapped weights, kernels/vec.h norms and attention products) with parallel_for threading; under
// the exact numerics mode (the calling thread's execution context, kernels/exec_config.h) it is
// the fp32 oracle that tests/python/test_vision_tower.py holds to 1e-5 of the fp64 reference
// tools/reference/vision_ref.py.
//
// Data flow for a batch of images i with grids (h_i, w_i), L_i = h_i·w_i patches, L = Σ L_i:
//   X [L, Dv]  = patches [L, 3·p·p] · W_peᵀ                                  §4.1
//   X[i]      += bilinear(pos_emb [Hpe, Wpe, Dv] -> h_i × w_i)               §4.2
//   per block b (§4.4): U = rms(X, norm0); QKV [L, 3A] = U·W_qkvᵀ; RoPE-2D on q, k (§4.3);
//     O [L, A] = softmax(q·kᵀ/√dh)·v per head, inside each image only; X += O·W_oᵀ;
//     U = rms(X, norm1); X += gelu_tanh(U·W_fc0ᵀ)·W_fc1ᵀ
//   X = rms(X, final_layernorm)                                             §4.5
//   Z [N, 4·Dv] = 2×2 space-to-depth of each image's X (TL, TR, BL, BR)     §5.1
//   E [N, Dt] = rms(gelu_erf(Z·W_p0ᵀ)·W_p2ᵀ, post_norm, projector_ln_eps)   §5.2
// The RMSNorm epsilon of the tower is kVisionNormEps (2^-23, vision.md §4.4).
//
// Attention is flash-style: for each (image, head, tile of query rows) the key rows are visited
// in tiles with an online softmax (running max and sum, rescaled accumulator), so no [L_i, L_i]
// score matrix exists; memory stays linear in L (workspace_bytes). The MLP runs over row chunks.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "io/checkpoint.h"
#include "model/dump.h"
#include "vision/image_patches.h"
#include "vision/vision_weights.h"

namespace k3::vision {

struct VisionOptions {
  int64_t query_tile = 64;  ///< query rows per attention work item
  int64_t key_tile = 256;   ///< key rows per online-softmax step
  int64_t mlp_rows = 1024;  ///< rows per MLP chunk (bounds the [rows, Iv] buffer)
  /// When set, named intermediates are written (all float32, rows of the batch concatenated):
  /// vision.patch_embed [L, Dv], vision.pos_emb [L, Dv], vision.embed [L, Dv] (X₀ + Q),
  /// vision.block.{b} [L, Dv] (after block b), vision.final_norm [L, Dv], vision.merge [N, Dp],
  /// vision.proj.fc0 [N, Dp] (after the GELU), vision.proj.fc2 [N, Dt], vision.output [N, Dt].
  DumpSink* dump = nullptr;
};

/// The tower's output for a batch.
struct VisionOutput {
  std::vector<float> embeddings;  ///< [N, Dt], images in input order, tokens row-major (R, C)
  std::vector<int64_t> n_tokens;  ///< per image: (h/2)·(w/2)
  uint64_t workspace_bytes = 0;   ///< activation memory this batch used (VisionTower::workspace_bytes)
};

class VisionTower {
 public:
  /// Binds the tower of `ck` (vision_weights.h; errors as bind_vision_weights, including the
  /// text-only refusal). `ck` must outlive the tower (matrices stay in its mappings).
  explicit VisionTower(const Checkpoint& ck);

  /// Encodes `images` as one batch (attention restricted to each image; the result of an image
  /// does not depend on the others up to the GEMM kernels' row-invariant tiling). Errors
  /// (k3::Error naming the image's `name`): an empty batch; a grid side not even or outside
  /// [2, 512]; patches.size() != grid_h·grid_w·588; a patch value that is not finite.
  VisionOutput encode(std::span<const ImagePatches> images, const VisionOptions& options = {}) const;

  /// Activation bytes of encode for a batch of `n_patches` patches in all whose largest image
  /// has `max_image_patches` (fp32 buffers: the packed patches [L, 588]; X, U [L, Dv]; QKV [L, 3A]; kᵀ [A, L]; O [L, A]; an
  /// MLP chunk [min(L, mlp_rows), Iv + Dv]; the position table of one image [L_i, Dv]; merge
  /// and projector [N, 2·Dp + Dt]; per-thread attention tiles). Linear in the patch count.
  uint64_t workspace_bytes(int64_t n_patches, int64_t max_image_patches, const VisionOptions& options = {}) const;

  const VisionConfig& config() const { return w_.config; }
  const VisionWeights& weights() const { return w_; }

 private:
  VisionWeights w_;
};

}  // namespace k3::vision
