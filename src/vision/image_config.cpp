// preprocessor_config.json -> ImagePreprocessConfig (shared/spec/vision.md §1.2).
#include "vision/image_config.h"

#include <nlohmann/json.hpp>

#include <cmath>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/read_file.h"
#include "vision/image_patches.h"

namespace k3::vision {
namespace {

using json = nlohmann::json;

std::string found(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

int64_t get_int(const json& obj, const char* key, const std::string& where, int64_t lo, int64_t hi, int64_t fallback) {
  if (!obj.contains(key)) return fallback;
  const json& v = obj[key];
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    throw Error(where + ": key \"" + key + "\": expected an integer in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "], found " + found(v));
  return v.get<int64_t>();
}

std::array<double, 3> get_triple(const json& obj, const char* key, const std::string& where, bool positive,
                                 std::array<double, 3> fallback) {
  if (!obj.contains(key)) return fallback;
  const json& v = obj[key];
  std::array<double, 3> out{};
  bool ok = v.is_array() && v.size() == 3;
  for (std::size_t c = 0; ok && c < 3; ++c) {
    ok = v[c].is_number() && std::isfinite(v[c].get<double>()) && (!positive || v[c].get<double>() > 0);
    if (ok) out[c] = v[c].get<double>();
  }
  if (!ok)
    throw Error(where + ": key \"" + key + "\": expected 3 finite numbers" + (positive ? " > 0" : "") +
                " (R, G, B), found " + found(v));
  return out;
}

}  // namespace

ImagePreprocessConfig ImagePreprocessConfig::parse(std::string_view json_text, const std::string& source) {
  check_json_depth(json_text, source);
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(source + ": expected JSON: " + e.what());
  }
  if (!root.is_object()) throw Error(source + ": expected a JSON object, found " + found(root));
  std::string where = source;
  const json* obj = &root;
  if (root.contains("media_proc_cfg")) {
    obj = &root["media_proc_cfg"];
    where = source + " media_proc_cfg";
    if (!obj->is_object()) throw Error(where + ": expected an object, found " + found(*obj));
  }
  const json& o = *obj;
  ImagePreprocessConfig c;
  c.patch_size = get_int(o, "patch_size", where, 1, 1 << 20, c.patch_size);
  if (c.patch_size != kPatchSize)
    throw Error(where + ": key \"patch_size\": this engine's vision tower takes 14-pixel patches, found " +
                std::to_string(c.patch_size));
  if (o.contains("merge_kernel_size") && o["merge_kernel_size"].is_array()) {
    const json& m = o["merge_kernel_size"];
    if (m.size() != 2 || !m[0].is_number_integer() || !m[1].is_number_integer() || m[0] != m[1] ||
        m[0].get<int64_t>() < 1 || m[0].get<int64_t>() > 64)
      throw Error(where +
                  ": key \"merge_kernel_size\": expected an integer in [1, 64] or a pair of equal ones, found " +
                  found(m));
    c.merge_kernel_size = m[0].get<int64_t>();
  } else {
    c.merge_kernel_size = get_int(o, "merge_kernel_size", where, 1, 64, c.merge_kernel_size);
  }
  if (c.merge_kernel_size != 2)
    throw Error(where + ": key \"merge_kernel_size\": this engine's vision tower merges 2x2 patches, found " +
                std::to_string(c.merge_kernel_size));
  c.in_patch_limit = get_int(o, "in_patch_limit", where, 1, int64_t{1} << 40, c.in_patch_limit);
  // the tower's 2D rotary table holds 512 positions per side (vision.md §4.3)
  c.patch_limit_on_one_side = get_int(o, "patch_limit_on_one_side", where, 1, 512, c.patch_limit_on_one_side);
  if (o.contains("fixed_output_tokens") && !o["fixed_output_tokens"].is_null())
    throw Error(where + ": key \"fixed_output_tokens\": only null (the token count follows the image size) is " +
                "supported, found " + found(o["fixed_output_tokens"]));
  c.image_mean = get_triple(o, "image_mean", where, false, c.image_mean);
  c.image_std = get_triple(o, "image_std", where, true, c.image_std);
  if (o.contains("transparent_bg_config")) {
    const json& bg = o["transparent_bg_config"];
    const std::string bw = where + " transparent_bg_config";
    if (!bg.is_object()) throw Error(bw + ": expected an object, found " + found(bg));
    if (bg.contains("pattern") && bg["pattern"] != "chessboard")
      throw Error(bw + ": key \"pattern\": expected \"chessboard\" (the K3 configuration), found " +
                  found(bg["pattern"]));
    c.chessboard_square_size = get_int(bg, "chessboard_square_size", bw, 1, 1 << 20, c.chessboard_square_size);
    if (bg.contains("chessboard_square_on_top_left")) {
      if (!bg["chessboard_square_on_top_left"].is_boolean())
        throw Error(bw + ": key \"chessboard_square_on_top_left\": expected true or false, found " +
                    found(bg["chessboard_square_on_top_left"]));
      c.chessboard_square_on_top_left = bg["chessboard_square_on_top_left"].get<bool>();
    }
    c.chessboard_white_value = static_cast<int>(get_int(bg, "chessboard_white_value", bw, 0, 255, 255));
    c.chessboard_gray_value = static_cast<int>(get_int(bg, "chessboard_gray_value", bw, 0, 255, 180));
  }
  if (o.contains("transparent_bg_fill_stage")) {
    const json& s = o["transparent_bg_fill_stage"];
    if (s == "after_resize") c.fill_stage = FillStage::kAfterResize;
    else if (s == "before_resize") c.fill_stage = FillStage::kBeforeResize;
    else
      throw Error(where +
                  ": key \"transparent_bg_fill_stage\": expected \"after_resize\" or \"before_resize\", found " +
                  found(s));
  }
  return c;
}

ImagePreprocessConfig ImagePreprocessConfig::load(const std::filesystem::path& file) {
  ReadLimits lim;
  lim.max_bytes = 1u << 20;
  return parse(read_file_bounded(file, "preprocessor config", lim), file.string());
}

ImagePreprocessConfig ImagePreprocessConfig::for_model_dir(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / "preprocessor_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return ImagePreprocessConfig{};
  return load(file);
}

}  // namespace k3::vision
