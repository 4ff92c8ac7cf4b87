// Checkpoint::open: config + shards (+ index) -> validated zero-copy tensor views (spec §2).
#include "io/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/read_file.h"
#include "io/json_util.h"
#include "io/safetensors.h"
#include "io/tensor_table.h"

namespace k3 {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::string dtypes_str(const std::vector<DType>& v) {
  std::string r;
  for (size_t i = 0; i < v.size(); ++i) r += (i ? " or " : "") + std::string(dtype_name(v[i]));
  return r;
}

std::string read_file(const fs::path& p) {
  ReadLimits lim;
  lim.max_bytes = kMetadataFileLimit;
  return read_file_bounded(p, p.filename().string(), lim);
}

bool ends_with(const std::string& s, std::string_view suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

// Streams model.safetensors.index.json: collects weight_map (tensor -> shard file) without
// building a DOM (the real index is ~60 MB with 497k entries); refuses duplicate tensor names.
class IndexSax {
 public:
  explicit IndexSax(const std::string& origin) : origin_(origin) {}
  std::vector<std::pair<std::string, std::string>> entries;
  bool saw_weight_map = false;

  bool null() { return value("null"); }
  bool boolean(bool) { return value("boolean"); }
  bool number_integer(json::number_integer_t) { return value("integer"); }
  bool number_unsigned(json::number_unsigned_t) { return value("integer"); }
  bool number_float(json::number_float_t, const json::string_t&) { return value("float"); }
  bool binary(json::binary_t&) { return value("binary"); }
  bool string(json::string_t& v) {
    if (in_map()) entries.emplace_back(std::move(key_), std::move(v));
    return true;
  }
  bool start_object(std::size_t) {
    if (in_map()) throw Error(origin_ + ": weight_map[\"" + key_ + "\"] must be a file name string, found object");
    if (depth_ == 1 && key_ == "weight_map") {
      if (saw_weight_map) throw Error(origin_ + ": duplicate key 'weight_map'");
      saw_weight_map = true;
      map_depth_ = 2;
    }
    ++depth_;
    return true;
  }
  bool end_object() {
    if (depth_ == map_depth_) map_depth_ = -1;
    --depth_;
    return true;
  }
  bool start_array(std::size_t) {
    if (in_map()) throw Error(origin_ + ": weight_map[\"" + key_ + "\"] must be a file name string, found array");
    ++depth_;
    ++arrays_;
    return true;
  }
  bool end_array() {
    --depth_;
    --arrays_;
    return true;
  }
  bool key(json::string_t& k) {
    key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    throw Error(origin_ + ": invalid JSON: " + e.what());
  }

 private:
  bool in_map() const { return map_depth_ > 0 && depth_ == map_depth_ && arrays_ == 0; }
  bool value(const char* type) {
    if (in_map()) throw Error(origin_ + ": weight_map[\"" + key_ + "\"] must be a file name string, found " + type);
    return true;
  }
  const std::string& origin_;
  std::string key_;
  int depth_ = 0, map_depth_ = -1, arrays_ = 0;
};

class CheckpointImpl final : public Checkpoint {
 public:
  CheckpointImpl(const fs::path& dir, const CheckpointOptions& options) : dir_(dir), options_(options) {
    const fs::path cfg = dir / "config.json";
    if (!fs::exists(cfg)) throw Error(dir.string() + ": no config.json in checkpoint directory");
    config_ = load_config(cfg);
    open_shards();
    classify();
    validate();
  }

  const ModelConfig& config() const override { return config_; }
  const fs::path& dir() const override { return dir_; }
  const TensorView* find(std::string_view text_name) const override {
    auto it = text_.find(text_name);
    return it == text_.end() ? nullptr : &tensors_[it->second];
  }
  const TensorView& get(std::string_view text_name) const override {
    const TensorView* t = find(text_name);
    if (!t) throw Error("tensor '" + prefix_ + std::string(text_name) + "' not found in " + dir_.string());
    return *t;
  }
  Mxfp4Matrix mxfp4(std::string_view base) const override {
    const std::string b(base);
    const TensorView& p = get(b + ".weight_packed");
    const TensorView& s = get(b + ".weight_scale");
    Mxfp4Matrix m;
    m.packed = p.data;
    m.scale = s.data;
    m.rows = p.dim(0);
    m.cols = p.dim(1) * 2;
    return m;
  }
  const std::vector<TensorView>& tensors() const override { return tensors_; }
  int shard_count() const override { return static_cast<int>(files_.size()); }

 private:
  void add_file(const std::string& fname) {
    auto f = std::make_unique<SafetensorsFile>(dir_ / fname, options_.map_data);
    for (const auto& e : f->header().entries) {
      offsets_.push_back(e.offset);
      TensorView v;
      v.name = e.name;
      v.dtype = e.dtype;
      v.shape = e.shape;
      v.data = f->data(e);
      v.nbytes = e.nbytes;
      v.file = fname;
      tensors_.push_back(std::move(v));
    }
    files_.push_back(std::move(f));
  }

  // After every file is loaded (tensors_ does not reallocate from here on, so views into names are stable).
  void index_names() {
    by_name_.reserve(tensors_.size());
    for (size_t i = 0; i < tensors_.size(); ++i) {
      auto [it, fresh] = by_name_.emplace(tensors_[i].name, i);
      if (!fresh)
        throw Error(dir_.string() + ": tensor '" + tensors_[i].name +
                    "' appears in two shards: " + tensors_[it->second].file + " and " + tensors_[i].file);
    }
  }

  void open_shards() {
    const fs::path index = dir_ / "model.safetensors.index.json";
    if (fs::exists(index)) {
      const std::string origin = index.string();
      IndexSax sax(origin);
      {
        const std::string text = read_file(index);
        check_json_depth(text, origin);
        json::sax_parse(text.begin(), text.end(), &sax, nlohmann::detail::input_format_t::json, true, false);
      }
      if (!sax.saw_weight_map) throw Error(origin + ": missing \"weight_map\" object");
      std::unordered_map<std::string, std::string> wm;  // tensor -> shard file
      std::map<std::string, std::string> first_tensor;  // shard -> a tensor it should hold
      wm.reserve(sax.entries.size());
      for (auto& [name, fn] : sax.entries) {
        if (fn.empty() || fn.find('/') != std::string::npos || fn == "." || fn == "..")
          throw Error(origin + ": weight_map[\"" + name + "\"] = \"" + fn +
                      "\" is not a plain file name inside the checkpoint directory");
        first_tensor.emplace(fn, name);
        if (!wm.try_emplace(std::move(name), std::move(fn)).second)
          throw Error(origin + ": duplicate key '" + name + "' in weight_map");
      }
      sax.entries.clear();
      sax.entries.shrink_to_fit();
      int64_t n_done = 0;
      const int64_t n_shards = static_cast<int64_t>(first_tensor.size());
      if (options_.progress) options_.progress("shard headers", 0, n_shards);
      for (const auto& [fn, t] : first_tensor) {
        if (!fs::exists(dir_ / fn))
          throw Error(origin + ": shard '" + fn + "' (holding e.g. tensor '" + t + "') does not exist in " +
                      dir_.string());
        add_file(fn);
        if (options_.progress) options_.progress("shard headers", ++n_done, n_shards);
      }
      index_names();
      for (const auto& v : tensors_) {
        auto it = wm.find(v.name);
        if (it == wm.end())
          throw Error(v.file + ": tensor '" + v.name + "' is in the shard but not in model.safetensors.index.json");
        if (it->second != v.file)
          throw Error(v.file + ": tensor '" + v.name + "' is in this shard but the index maps it to " + it->second);
      }
      for (const auto& [name, fn] : wm)
        if (!by_name_.count(name))
          throw Error(origin + ": index maps tensor '" + name + "' to " + fn + ", but that shard has no such tensor");
    } else if (fs::exists(dir_ / "model.safetensors")) {
      if (options_.progress) options_.progress("shard headers", 0, 1);
      add_file("model.safetensors");
      if (options_.progress) options_.progress("shard headers", 1, 1);
      index_names();
    } else {
      throw Error(dir_.string() + ": neither model.safetensors.index.json nor model.safetensors found");
    }
  }

  void classify() {
    for (const auto& v : tensors_)
      if (v.name.rfind(kTextPrefix, 0) == 0) {
        prefix_ = kTextPrefix;
        break;
      }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const std::string& n = tensors_[i].name;
      if (is_vision_tensor_name(n)) continue;  // skipped; data never touched
      if (!prefix_.empty() && n.rfind(prefix_, 0) != 0)
        throw Error(tensors_[i].file + ": tensor '" + n + "' is neither a text tensor (" + prefix_ +
                    "*) nor a vision tensor (vision_tower.*, mm_projector.*)");
      const std::string_view tn = std::string_view(n).substr(prefix_.size());
      text_.emplace(tn, i);
      for (std::string_view suf : {std::string_view(".weight_packed"), std::string_view(".weight_scale")})
        if (tn.ends_with(suf) && !is_expert_matrix_base(std::string(tn.substr(0, tn.size() - suf.size()))))
          throw Error(tensors_[i].file + ": tensor '" + n + "': stray " + std::string(suf.substr(1)) +
                      " — MXFP4 packing is only allowed for block_sparse_moe.experts.N.w1/w2/w3 (spec §1.4)");
    }
  }

  [[noreturn]] void missing(const std::string& tn, const std::string& expect) const {
    throw Error(dir_.string() + ": missing tensor '" + prefix_ + tn + "' (expected " + expect + ")");
  }
  std::string where(const TensorView& v) const { return v.file + ": tensor '" + v.name + "'"; }

  void check_plain(const TensorSpec& s, const TensorView& v, const std::string& display_shape_of) {
    if (!s.accepts_dtype(v.dtype))
      throw Error(where(v) + ": dtype " + std::string(dtype_name(v.dtype)) + ", expected " + dtypes_str(s.dtypes) +
                  " (spec §2)");
    if (!s.accepts_shape(v.shape))
      throw Error(where(v) + ": shape " + shape_str(v.shape) + ", expected " + display_shape_of +
                  (s.zero_padded ? " (or zero-padded along dim 0)" : ""));
    if (s.zero_padded && v.shape[0] > s.shape[0] && v.dtype == DType::F32) {
      int64_t inner = 1;
      for (size_t d = 1; d < v.shape.size(); ++d) inner *= v.shape[d];
      const int64_t first_pad = s.shape[0] * inner;
      const std::vector<uint8_t> pad =
          read_bytes(v, static_cast<uint64_t>(first_pad) * 4, v.nbytes - static_cast<uint64_t>(first_pad) * 4);
      for (int64_t i = first_pad; i < v.numel(); ++i) {
        float x;
        std::memcpy(&x, pad.data() + (i - first_pad) * 4, 4);
        if (!(x == 0.0f))
          throw Error(where(v) + ": " + std::string(ends_with(s.name, "A_log") ? "A_log" : "tensor") +
                      " padding entries must be zero; found " + std::to_string(x) + " at index " + std::to_string(i) +
                      " (real entries: " + std::to_string(s.shape[0]) + ")");
      }
    }
  }

  const TensorView* take(const std::string& tn) {
    auto it = text_.find(tn);
    if (it == text_.end()) return nullptr;
    used_[it->second] = true;
    return &tensors_[it->second];
  }

  void validate() {
    used_.assign(tensors_.size(), false);
    for_each_tensor_spec(config_, [&](const TensorSpec& s) {
      if (s.storage == TensorStorage::Plain) {
        const TensorView* v = take(s.name);
        if (!v) missing(s.name, dtypes_str(s.dtypes) + " " + shape_str(s.shape));
        check_plain(s, *v, shape_str(s.shape));
        return;
      }
      const TensorView* p = take(s.name + ".weight_packed");
      const TensorView* q = take(s.name + ".weight_scale");
      if (!p && !q) {
        const TensorView* w = take(s.name + ".weight");
        if (!w) {
          const auto st = stored_tensors(s);
          missing(st[0].name, "U8 " + shape_str(st[0].shape) + " with " + st[1].name + " U8 " + shape_str(st[1].shape) +
                                  ", MXFP4 of logical " + shape_str(s.shape));
        }
        check_plain(s, *w, shape_str(s.shape));
        return;
      }
      const auto st = stored_tensors(s);  // throws when cols % 32 != 0
      if (!p) missing(st[0].name, "U8 " + shape_str(st[0].shape) + " next to its .weight_scale");
      if (!q) missing(st[1].name, "U8 " + shape_str(st[1].shape) + " next to its .weight_packed");
      for (int k = 0; k < 2; ++k) {
        const TensorView& v = k == 0 ? *p : *q;
        if (v.dtype != DType::U8)
          throw Error(where(v) + ": dtype " + std::string(dtype_name(v.dtype)) + ", expected U8 (MXFP4, spec §4)");
        if (v.shape != st[static_cast<size_t>(k)].shape)
          throw Error(where(v) + ": shape " + shape_str(v.shape) + ", expected " +
                      shape_str(st[static_cast<size_t>(k)].shape) + " (MXFP4 of logical " + shape_str(s.shape) + ")");
      }
    });
    // The vision tower (vision.md §2), when config.json declares one: every row present, checked
    // with the same rule; without a tower, vision tensors are skipped (a text-only checkpoint).
    for (const TensorSpec& s : vision_tensors(config_)) {
      auto it = by_name_.find(s.name);
      if (it == by_name_.end())
        throw Error(dir_.string() + ": missing tensor '" + s.name + "' (expected " + dtypes_str(s.dtypes) + " " +
                    shape_str(s.shape) + "; config.json declares a vision tower in vision_config)");
      used_[it->second] = true;
      check_plain(s, tensors_[it->second], shape_str(s.shape));
    }
    for (size_t i = 0; i < tensors_.size(); ++i)
      if (!used_[i] && config_.vision && is_vision_tensor_name(tensors_[i].name))
        throw Error(where(tensors_[i]) +
                    ": unexpected tensor (not in the K3 vision tower's tensor table for this "
                    "vision_config: " +
                    std::to_string(config_.vision->num_layers) + " blocks)");
    for (size_t i = 0; i < tensors_.size(); ++i)
      if (!used_[i] && !is_vision_tensor_name(tensors_[i].name))
        throw Error(where(tensors_[i]) + ": unexpected tensor (not in the K3 tensor table for this config: " +
                    std::to_string(config_.num_hidden_layers) + " layers, " + std::to_string(config_.num_experts) +
                    " experts)");
    used_.clear();
    used_.shrink_to_fit();
  }

  // Bytes [off, off + n) of v's data: from the mapping, or read with pread when unmapped.
  std::vector<uint8_t> read_bytes(const TensorView& v, uint64_t off, uint64_t n) const {
    std::vector<uint8_t> out(static_cast<size_t>(n));
    if (v.data) {
      std::memcpy(out.data(), v.data + off, static_cast<size_t>(n));
      return out;
    }
    const size_t i = static_cast<size_t>(&v - tensors_.data());
    std::ifstream f(dir_ / v.file, std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offsets_[i] + off));
    if (!f.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(n)))
      throw Error(where(v) + ": cannot read " + std::to_string(n) + " bytes of its data");
    return out;
  }

  fs::path dir_;
  CheckpointOptions options_;
  std::vector<uint64_t> offsets_;  // absolute file offset of each tensor's data (parallel to tensors_)
  ModelConfig config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<TensorView> tensors_;
  std::unordered_map<std::string_view, size_t> by_name_;  // full name -> index (views into tensors_)
  std::unordered_map<std::string_view, size_t> text_;     // text name (prefix stripped) -> index
  std::string prefix_;
  std::vector<bool> used_;
};

}  // namespace

std::unique_ptr<Checkpoint> Checkpoint::open(const std::filesystem::path& dir, const CheckpointOptions& options) {
  if (!fs::is_directory(dir)) throw Error(dir.string() + ": not a checkpoint directory");
  return std::make_unique<CheckpointImpl>(dir, options);
}

}  // namespace k3
