// Image bytes -> ImagePatches: the K3 image processor end to end (shared/spec/vision.md §3):
// decode in the native mode (image_decode.h), the target size (image_target_size.h), the resize
// only when needed (image_resize.h), the transparency fill (image_fill.h), then pad bottom/right
// with 0, normalise and cut into 14x14 patches (§3.4).
#pragma once
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "vision/image_config.h"
#include "vision/image_decode.h"
#include "vision/image_patches.h"
#include "vision/image_target_size.h"

namespace k3::vision {

/// What preprocess_image found, for messages and `k3 image-info`.
struct ImageInfo {
  ImageFormat format = ImageFormat::kPng;
  ImageMode mode = ImageMode::kRGB;  ///< the mode the image was decoded in
  TargetSize size;
};

/// The normalised value of 8-bit value v in channel c (0 = R, 1 = G, 2 = B), spec §3.4:
/// x = f32(v / 255) in double; y = f32(double(x) - mean_c); out = f32(double(y) * (1 / std_c)).
float normalize_value(uint8_t v, int c, const ImagePreprocessConfig& cfg);

/// uint8 RGB [t.height, t.width, 3] -> patches: padded with 0 to [grid_h * 14, grid_w * 14, 3]
/// (bottom and right), normalised, and reordered to float32 [grid_h * grid_w, 3, 14, 14] (patch
/// n = r * grid_w + c; inside a patch ch * 196 + ky * 14 + kx).
ImagePatches patchify_rgb(std::span<const uint8_t> rgb, const TargetSize& t, const ImagePreprocessConfig& cfg,
                          std::string name);

/// The whole pipeline for one image held in memory. `name` is carried into the result and into
/// every error ("image <name>: ..."). Errors (k3::Error): those of decode_image (format, limits,
/// corrupt data) and navit_target_size (too many patches per side).
ImagePatches preprocess_image(std::span<const uint8_t> bytes, std::string name, const ImagePreprocessConfig& cfg,
                              const ImageLimits& limits, ImageInfo* info = nullptr);

/// preprocess_image of a file (read bounded to limits.max_bytes; named by its path).
ImagePatches preprocess_image_file(const std::filesystem::path& file, const ImagePreprocessConfig& cfg,
                                   const ImageLimits& limits, ImageInfo* info = nullptr);

}  // namespace k3::vision
