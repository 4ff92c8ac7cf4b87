// navit_target_size (shared/spec/vision.md §3.2).
#include "vision/image_target_size.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace k3::vision {

TargetSize navit_target_size(int64_t width0, int64_t height0, const ImagePreprocessConfig& cfg,
                             const std::string& name) {
  if (width0 < 1 || height0 < 1)
    throw Error("image " + name + ": zero size (" + std::to_string(width0) + "x" + std::to_string(height0) + ")");
  const int64_t P = cfg.patch_size, M = cfg.merge_kernel_size, F = P * M;
  const int64_t side = cfg.patch_limit_on_one_side * P;
  const double patches = static_cast<double>(std::max<int64_t>(1, width0 / P) * std::max<int64_t>(1, height0 / P));
  const double s1 = std::sqrt(static_cast<double>(cfg.in_patch_limit) / patches);
  const double s2 = static_cast<double>(side) / static_cast<double>(width0);
  const double s3 = static_cast<double>(side) / static_cast<double>(height0);
  const double scale = std::min({1.0, s1, s2, s3});
  TargetSize t;
  t.width0 = width0;
  t.height0 = height0;
  // trunc toward zero of one double product, as Python's int(W0 * scale).
  t.width = std::min(std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(width0) * scale)), side);
  t.height = std::min(std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(height0) * scale)), side);
  t.pad_w = (F - t.width % F) % F;
  t.pad_h = (F - t.height % F) % F;
  t.grid_h = (t.height + t.pad_h) / P;
  t.grid_w = (t.width + t.pad_w) / P;
  if (t.grid_h > cfg.patch_limit_on_one_side || t.grid_w > cfg.patch_limit_on_one_side)
    throw Error("image " + name + ": too many patches per side: grid " + std::to_string(t.grid_h) + "x" +
                std::to_string(t.grid_w) + " for " + std::to_string(width0) + "x" + std::to_string(height0) +
                " pixels, limit " + std::to_string(cfg.patch_limit_on_one_side) + " (patch_limit_on_one_side)");
  return t;
}

}  // namespace k3::vision
