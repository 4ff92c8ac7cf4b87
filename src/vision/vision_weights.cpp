#include "vision/vision_weights.h"

#include <cstring>
#include <string>
#include <unordered_map>

#include "core/bf16.h"
#include "core/error.h"
#include "io/tensor_table.h"

namespace k3::vision {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

class VisionBinder {
 public:
  explicit VisionBinder(const Checkpoint& ck) : ck_(ck), c_(ck.config()) {
    for (const TensorView& t : ck.tensors())
      if (is_vision_tensor_name(t.name)) by_name_.emplace(t.name, &t);
  }

  const TensorView& stored(TensorRole r, int il = -1) const {
    const TensorSpec s = tensor_spec(c_, r, il);
    auto it = by_name_.find(s.name);
    if (it == by_name_.end())
      throw Error(ck_.dir().string() + ": missing tensor '" + s.name + "' (expected BF16 " + shape_str(s.shape) + ")");
    const TensorView& t = *it->second;
    if (!s.accepts_dtype(t.dtype) || !s.accepts_shape(t.shape))
      throw Error("tensor '" + t.name + "': expected BF16" + shape_str(s.shape) + ", found " +
                  std::string(dtype_name(t.dtype)) + shape_str(t.shape));
    if (!t.data) throw Error("tensor '" + t.name + "': the checkpoint was opened without mapping its data");
    return t;
  }
  const TensorView* matrix(TensorRole r, int il = -1) const { return &stored(r, il); }
  std::vector<float> vector(TensorRole r, int il = -1) const {
    const TensorView& t = stored(r, il);
    std::vector<float> out(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      out[i] = bf16_to_f32(h);
    }
    return out;
  }

 private:
  const Checkpoint& ck_;
  const ModelConfig& c_;
  std::unordered_map<std::string, const TensorView*> by_name_;
};

}  // namespace

VisionWeights bind_vision_weights(const Checkpoint& ck) {
  const ModelConfig& c = ck.config();
  if (!c.vision)
    throw Error(ck.dir().string() + " has no vision tower (" +
                (c.vision_kind == VisionConfigKind::Placeholder
                     ? std::string("vision_config in config.json is a placeholder without vt_hidden_size")
                     : std::string("no vision_config in config.json")) +
                ")");
  const VisionBinder b(ck);
  VisionWeights w;
  w.config = *c.vision;
  w.patch_embed = *b.matrix(TensorRole::VisionPatchEmbed);
  w.patch_embed.shape = {w.patch_embed.shape[0], w.patch_embed.numel() / w.patch_embed.shape[0]};
  w.pos_emb = b.vector(TensorRole::VisionPosEmb);
  w.blocks.resize(static_cast<size_t>(w.config.num_layers));
  for (int il = 0; il < w.config.num_layers; ++il) {
    VisionBlockWeights& k = w.blocks[static_cast<size_t>(il)];
    k.norm0 = b.vector(TensorRole::VisionNorm0, il);
    k.wqkv = b.matrix(TensorRole::VisionWqkv, il);
    k.wo = b.matrix(TensorRole::VisionWo, il);
    k.norm1 = b.vector(TensorRole::VisionNorm1, il);
    k.fc0 = b.matrix(TensorRole::VisionFc0, il);
    k.fc1 = b.matrix(TensorRole::VisionFc1, il);
  }
  w.final_norm = b.vector(TensorRole::VisionFinalNorm);
  w.proj0 = b.matrix(TensorRole::ProjectorFc0);
  w.proj2 = b.matrix(TensorRole::ProjectorFc2);
  w.post_norm = b.vector(TensorRole::ProjectorPostNorm);
  return w;
}

}  // namespace k3::vision
