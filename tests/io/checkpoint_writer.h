// Test-fixture writer: safetensors files and whole K3 checkpoints in the published layout
// (config wrapper, "language_model." prefix, model-XXXXX-of-YYYYYY shards + index, tensors in
// lexicographic order inside each shard, MXFP4 experts, F32 small tensors, vision tensors).
// The expected inventory comes from the tensor table (io/tensor_table.h).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/config.h"

namespace k3test {

namespace fs = std::filesystem;

/// A temporary directory under /tmp, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

/// One tensor to write. `data` empty => a deterministic byte pattern (or nothing when sparse).
struct FxTensor {
  std::string name;  ///< full checkpoint name
  k3::DType dtype = k3::DType::BF16;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
  uint64_t nbytes() const;
};

/// Writes `tensors` as one safetensors file, sorted by name, data back to back. With `sparse`,
/// data regions are never written: the file is extended with ftruncate (a sparse hole).
/// `metadata` (may be null) becomes "__metadata__".
void write_safetensors(const fs::path& file, std::vector<FxTensor> tensors, bool sparse = false,
                       const nlohmann::json& metadata = nullptr);

/// Writes raw bytes: 8-byte LE `header_len` (defaults to header.size()), `header`, then
/// `data_bytes` zero bytes.
void write_raw_safetensors(const fs::path& file, const std::string& header, uint64_t data_bytes,
                           int64_t header_len = -1);

/// Published on-disk inventory of the text model for `cfg` (names with `prefix`), in table order.
/// A_log is written padded to `a_log_len` entries (0 = unpadded) with values 0.5+0.25*h then zeros.
std::vector<FxTensor> text_inventory(const k3::ModelConfig& cfg, const std::string& prefix = "language_model.",
                                     int a_log_len = 0);

/// 165 vision_tower.* + 3 mm_projector.* tensors: K3's published names and shapes (vision.md §2),
/// or, when `tiny`, small placeholder tensors of a text-only checkpoint (never validated).
std::vector<FxTensor> vision_inventory(bool tiny);

/// A tiny K3-shaped config (wrapper with text_config): 5 layers (KDA K K M K M, 1-indexed
/// kda_layers [1,2,4]), layer 0 dense, 4 experts top-2, AttnRes block 3, hidden 64.
nlohmann::json tiny_config_json();

/// Shard file name as published: "model-00001-of-000096.safetensors".
std::string shard_name(int i, int n);

/// A checkpoint to write: config + tensors + shard layout. Layer N goes to shard N % (n-2),
/// globals to shard n-2, vision to shard n-1 (0-based; needs n >= 3), unless `shard_of` is set.
struct FxCheckpoint {
  nlohmann::json config;
  std::vector<FxTensor> tensors;
  int n_shards = 3;  ///< 0 => single model.safetensors, no index
  bool sparse = false;
  std::function<int(const std::string& name)> shard_of;   ///< optional override
  std::function<void(nlohmann::json& index)> edit_index;  ///< optional index mutation
  void write(const fs::path& dir) const;
};

/// The tiny checkpoint, published layout (prefix, 3 shards + index, MXFP4 experts, A_log padded
/// to 4 for 2 heads, vision tensors).
FxCheckpoint tiny_checkpoint();

/// Finds a tensor by full name in `t` (throws std::out_of_range when absent).
FxTensor& fx_find(std::vector<FxTensor>& t, const std::string& name);

}  // namespace k3test
