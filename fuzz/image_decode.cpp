// libFuzzer: image bytes -> ImagePatches (vision/image_preprocess.h: the PNG, JPEG and WebP
// decoders, the resize, the fill, the patches) under small limits. Any input must give patches or
// throw k3::Error; patches must have the grid's shape and values in [-1, 1].
// The first byte picks the configuration (Pillow behaviour, fill stage, patch budget), the rest is
// the image.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "vision/image_preprocess.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  k3::vision::ImagePreprocessConfig cfg;
  cfg.in_patch_limit = 4 + (data[0] & 0x3F);  // resizes everything wider than a few patches
  cfg.patch_limit_on_one_side = 16;
  if (data[0] & 0x40) cfg.fill_stage = k3::vision::FillStage::kBeforeResize;
  if (data[0] & 0x80) cfg.pillow = k3::vision::PillowCompat::kPillow13;
  k3::vision::ImageLimits limits;
  limits.max_bytes = 1 << 20;
  limits.max_source_pixels = 1 << 18;  // 512 x 512
  try {
    k3::vision::ImageInfo info;
    const k3::vision::ImagePatches p =
        k3::vision::preprocess_image(std::span(data + 1, size - 1), "fuzz", cfg, limits, &info);
    if (p.grid_h < 2 || p.grid_w < 2 || p.grid_h % 2 || p.grid_w % 2) __builtin_trap();
    if (p.grid_h > 16 || p.grid_w > 16) __builtin_trap();
    if (p.patches.size() != static_cast<size_t>(p.grid_h * p.grid_w * k3::vision::kPatchValues)) __builtin_trap();
    for (float v : p.patches)
      if (!(v >= -1.0f && v <= 1.0f)) __builtin_trap();
    if (info.size.width > info.size.width0 || info.size.height > info.size.height0) __builtin_trap();
  } catch (const k3::Error&) {
  }
  return 0;
}
