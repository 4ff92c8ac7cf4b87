// Checkpoint: a K3 checkpoint directory as published (config.json, model.safetensors.index.json
// + shards, or a single model.safetensors), memory-mapped, validated against the tensor table
// (spec §2). Tensors are zero-copy views into the mappings.
#pragma once
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/progress.h"
#include "core/tensor.h"
#include "io/config.h"

namespace k3 {

struct CheckpointOptions {
  /// false: only the headers are read (pread) and nothing is mapped — every TensorView::data is
  /// nullptr (for `k3 info`, which needs names, shapes and dtypes only: the real K3's 96 shards
  /// would otherwise reserve 1.56 TB of address space).
  bool map_data = true;
  /// Called with ("shard headers", 0, shard count) before the first shard and after each shard's
  /// header is read (shards done); may be empty.
  ProgressFn progress;
};

class Checkpoint {
 public:
  /// Opens and validates `dir`. Throws k3::Error naming the file/tensor/key on any problem.
  static std::unique_ptr<Checkpoint> open(const std::filesystem::path& dir, const CheckpointOptions& options = {});
  virtual ~Checkpoint() = default;

  virtual const ModelConfig& config() const = 0;
  virtual const std::filesystem::path& dir() const = 0;

  /// Text-model tensor by its name WITHOUT the "language_model." prefix, e.g.
  /// "model.layers.3.self_attn.q_proj.weight" or "lm_head.weight". nullptr when absent.
  virtual const TensorView* find(std::string_view text_name) const = 0;
  /// Same, throwing k3::Error("tensor '<full name>' not found in <dir>") when absent.
  virtual const TensorView& get(std::string_view text_name) const = 0;
  /// MXFP4 matrix from "<base>.weight_packed" + "<base>.weight_scale" (base without prefix and
  /// without ".weight_*"), e.g. "model.layers.1.block_sparse_moe.experts.7.w1".
  virtual Mxfp4Matrix mxfp4(std::string_view base) const = 0;

  /// Every tensor in the checkpoint (text, vision), in index order.
  virtual const std::vector<TensorView>& tensors() const = 0;
  virtual int shard_count() const = 0;
};

}  // namespace k3
