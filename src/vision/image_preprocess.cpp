// preprocess_image (image_preprocess.h; shared/spec/vision.md §3). Built with -ffp-contract=off.
#include "vision/image_preprocess.h"

#include <array>

#include "core/error.h"
#include "core/read_file.h"
#include "vision/image_fill.h"
#include "vision/image_resize.h"

namespace k3::vision {

float normalize_value(uint8_t v, int c, const ImagePreprocessConfig& cfg) {
  const float x = static_cast<float>(static_cast<double>(v) / 255.0);
  const float y = static_cast<float>(static_cast<double>(x) - cfg.image_mean[c]);
  return static_cast<float>(static_cast<double>(y) * (1.0 / cfg.image_std[c]));
}

ImagePatches patchify_rgb(std::span<const uint8_t> rgb, const TargetSize& t, const ImagePreprocessConfig& cfg,
                          std::string name) {
  const int64_t P = cfg.patch_size;
  if (rgb.size() != static_cast<std::size_t>(t.width * t.height * 3))
    throw Error("image " + name + ": patchify: expected " + std::to_string(t.width * t.height * 3) +
                " RGB bytes, found " + std::to_string(rgb.size()));
  std::array<std::array<float, 256>, 3> table;
  for (int c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v) table[c][v] = normalize_value(static_cast<uint8_t>(v), c, cfg);
  ImagePatches out;
  out.grid_h = t.grid_h;
  out.grid_w = t.grid_w;
  out.width = t.width0;
  out.height = t.height0;
  out.name = std::move(name);
  out.patches.resize(static_cast<std::size_t>(t.grid_h * t.grid_w * 3 * P * P));
  float* dst = out.patches.data();
  for (int64_t r = 0; r < t.grid_h; ++r)
    for (int64_t pc = 0; pc < t.grid_w; ++pc)
      for (int c = 0; c < 3; ++c)
        for (int64_t ky = 0; ky < P; ++ky)
          for (int64_t kx = 0; kx < P; ++kx) {
            const int64_t y = r * P + ky, x = pc * P + kx;
            const uint8_t v =
                (y < t.height && x < t.width) ? rgb[static_cast<std::size_t>((y * t.width + x) * 3 + c)] : 0;
            *dst++ = table[c][v];
          }
  return out;
}

ImagePatches preprocess_image(std::span<const uint8_t> bytes, std::string name, const ImagePreprocessConfig& cfg,
                              const ImageLimits& limits, ImageInfo* info) {
  const DecodedImage im = decode_image(bytes, name, limits);
  const TargetSize t = navit_target_size(im.width, im.height, cfg, name);
  std::vector<uint8_t> rgb;
  if (cfg.fill_stage == FillStage::kAfterResize) {
    rgb = fill_transparent_to_rgb(resize_image(im, t.width, t.height, cfg.pillow), cfg);
  } else {
    DecodedImage filled;
    filled.format = im.format;
    filled.mode = ImageMode::kRGB;
    filled.width = im.width;
    filled.height = im.height;
    filled.pixels = fill_transparent_to_rgb(im, cfg);
    rgb = std::move(resize_image(filled, t.width, t.height, cfg.pillow).pixels);
  }
  if (info) *info = ImageInfo{im.format, im.mode, t};
  return patchify_rgb(rgb, t, cfg, std::move(name));
}

ImagePatches preprocess_image_file(const std::filesystem::path& file, const ImagePreprocessConfig& cfg,
                                   const ImageLimits& limits, ImageInfo* info) {
  ReadLimits lim;
  lim.max_bytes = limits.max_bytes;
  lim.allow_pipe = true;
  const std::string bytes = read_file_bounded(file, "image", lim);
  return preprocess_image(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), file.string(), cfg,
                          limits, info);
}

}  // namespace k3::vision
