// vision_config of config.json -> VisionConfig (shared spec vision.md §1.1).
#include "io/vision_config.h"

#include <nlohmann/json.hpp>

#include <climits>

#include "core/error.h"
#include "io/json_util.h"

namespace k3 {

namespace {

using nlohmann::json;

class VisionReader {
 public:
  VisionReader(const json& obj, const std::string& origin) : obj_(obj), origin_(origin) {}

  [[noreturn]] void fail(const std::string& k, const std::string& what) const {
    throw Error(origin_ + ": key 'vision_config." + k + "': " + what);
  }
  const json* find(const std::string& k) const {
    auto it = obj_.find(k);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  int to_int(const std::string& k, const json& v) const {
    if (!v.is_number_integer() && !v.is_number_unsigned())
      fail(k, "expected an integer, found " + json_type_name(v) + " " + v.dump());
    if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(INT_MAX)
                               : (v.get<int64_t>() < INT_MIN || v.get<int64_t>() > INT_MAX))
      fail(k, "integer " + v.dump() + " out of range");
    return static_cast<int>(v.get<int64_t>());
  }
  /// A required dimension: an integer >= 1.
  int dim(const std::string& k) const {
    const json* v = find(k);
    if (!v) throw Error(origin_ + ": missing required key 'vision_config." + k + "' (the vision tower's geometry)");
    const int x = to_int(k, *v);
    if (x < 1) fail(k, "expected a positive integer, found " + std::to_string(x));
    return x;
  }
  /// An optional key that, when present, must hold K3's value `want` (the only variant computed).
  void only(const std::string& k, const json& want) const {
    const json* v = find(k);
    if (v && *v != want)
      fail(k, v->dump() + " is not supported (k3.cpp computes the K3 tower: " + want.dump() + ", vision.md §1.1)");
  }

 private:
  const json& obj_;
  const std::string& origin_;
};

}  // namespace

std::optional<VisionConfig> parse_vision_config(const json& top, const std::string& origin, int text_hidden,
                                                VisionConfigKind* kind) {
  if (kind) *kind = VisionConfigKind::Absent;
  auto it = top.find("vision_config");
  if (it == top.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) throw Error(origin + ": key 'vision_config': expected an object, found " + json_type_name(*it));
  const json& v = *it;
  if (!v.contains("vt_hidden_size")) {
    if (kind) *kind = VisionConfigKind::Placeholder;
    return std::nullopt;
  }
  if (kind) *kind = VisionConfigKind::Tower;
  const VisionReader r(v, origin);
  VisionConfig c;
  c.hidden_size = r.dim("vt_hidden_size");
  c.num_layers = r.dim("vt_num_hidden_layers");
  c.num_heads = r.dim("vt_num_attention_heads");
  c.qkv_hidden_size = r.find("qkv_hidden_size") ? r.dim("qkv_hidden_size") : c.hidden_size;
  c.intermediate_size = r.dim("vt_intermediate_size");
  c.pos_emb_height = r.dim("init_pos_emb_height");
  c.pos_emb_width = r.dim("init_pos_emb_width");
  c.mm_hidden_size = r.dim("mm_hidden_size");
  c.text_hidden_size = r.dim("text_hidden_size");
  c.patch_size = r.dim("patch_size");
  if (const json* m = r.find("merge_kernel_size")) {
    if (m->is_array()) {
      if (m->size() != 2) r.fail("merge_kernel_size", "expected [h, w], found " + m->dump());
      c.merge_h = r.to_int("merge_kernel_size[0]", (*m)[0]);
      c.merge_w = r.to_int("merge_kernel_size[1]", (*m)[1]);
    } else {
      c.merge_h = c.merge_w = r.to_int("merge_kernel_size", *m);
    }
  } else {
    throw Error(origin + ": missing required key 'vision_config.merge_kernel_size'");
  }
  if (const json* e = r.find("projector_ln_eps")) {
    if (!e->is_number() || !(e->get<double>() > 0))
      r.fail("projector_ln_eps", "expected a positive number, found " + e->dump());
    c.projector_eps = static_cast<float>(e->get<double>());
  }
  r.only("norm_type", "rmsnorm");
  r.only("attn_bias", false);
  r.only("linear_bias", false);
  r.only("patch_embed_proj_bias", false);
  r.only("mlp_type", "mlp2");
  r.only("activation_func", "gelu_pytorch_tanh");
  r.only("pos_emb_type", "divided_fixed");
  r.only("pos_emb_interpolation_mode", "bilinear");
  r.only("merge_type", "sd2_tpool");
  r.only("mm_projector_type", "patchmergerv2");
  if (c.patch_size != 14)
    r.fail("patch_size", std::to_string(c.patch_size) + " is not supported (the preprocessing makes 14-pixel patches)");
  if (c.merge_h != 2 || c.merge_w != 2)
    r.fail("merge_kernel_size",
           "[" + std::to_string(c.merge_h) + ", " + std::to_string(c.merge_w) + "] is not supported (K3 merges 2x2)");
  if (c.qkv_hidden_size % c.num_heads != 0)
    r.fail("qkv_hidden_size", std::to_string(c.qkv_hidden_size) + " is not a multiple of vt_num_attention_heads " +
                                  std::to_string(c.num_heads));
  if (c.head_dim() % 4 != 0)
    r.fail("qkv_hidden_size", "head dim " + std::to_string(c.head_dim()) +
                                  " (qkv_hidden_size / vt_num_attention_heads) is not a multiple of 4 (the 2D RoPE "
                                  "rotates 4 dims per frequency, vision.md §4.3)");
  if (c.mm_hidden_size != c.hidden_size)
    r.fail("mm_hidden_size", std::to_string(c.mm_hidden_size) + " differs from vt_hidden_size " +
                                 std::to_string(c.hidden_size) + " (the projector reads the tower's output)");
  if (c.text_hidden_size != text_hidden)
    r.fail("text_hidden_size", std::to_string(c.text_hidden_size) + " differs from the text model's hidden_size " +
                                   std::to_string(text_hidden) + " (image embeddings replace token embeddings)");
  return c;
}

}  // namespace k3
