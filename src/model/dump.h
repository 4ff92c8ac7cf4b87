// DumpSink: records named intermediates of a forward pass in the shared dump format:
// DIR/<name>.npy (npy v1.0, little-endian, C order; float32 unless stated) and
// DIR/manifest.json = {"tensors": [names in execution order]}.
// Names written by Model::forward (T tokens of the call, D hidden, n AttnRes sources, k top-k):
//   tok.embed [T,D]; per layer il: blk.{il}.attn_mix_w [T,n] (absent at layer 0),
//   blk.{il}.attn_in [T,D], blk.{il}.attn_out [T,D], blk.{il}.ffn_mix_w [T,n], blk.{il}.ffn_in [T,D],
//   blk.{il}.router_topk_ids [T,k] int32 (MoE only, ascending ids), blk.{il}.router_topk_w [T,k],
//   blk.{il}.ffn_out [T,D]; out.mix_w [T,n], out.final [T,D], logits [T,V].
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace k3 {

class DumpSink {
 public:
  /// Creates `dir` if needed. Throws k3::Error when it cannot be created.
  explicit DumpSink(std::filesystem::path dir);
  /// Writes the manifest (errors swallowed; call finish() to see them).
  ~DumpSink();
  DumpSink(const DumpSink&) = delete;
  DumpSink& operator=(const DumpSink&) = delete;

  /// Writes <name>.npy with dtype float32 ('<f4') and `shape` (outermost first); data holds
  /// prod(shape) values. A repeated name overwrites the file and keeps its first manifest slot.
  void add(const std::string& name, const std::vector<int64_t>& shape, const float* data);
  /// Same with dtype int32 ('<i4').
  void add_i32(const std::string& name, const std::vector<int64_t>& shape, const int32_t* data);
  /// Writes manifest.json now. Throws k3::Error on an I/O failure.
  void finish();

  const std::vector<std::string>& names() const { return names_; }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  void write_npy(const std::string& name, const char* descr, const std::vector<int64_t>& shape, const void* data,
                 size_t elem_size);
  std::filesystem::path dir_;
  std::vector<std::string> names_;
};

/// Writes a standalone .npy file (v1.0, little-endian, C order), descr "<f4".
/// Throws k3::Error naming the file on an I/O failure.
void write_npy_f32(const std::filesystem::path& file, const std::vector<int64_t>& shape, const float* data);

}  // namespace k3
