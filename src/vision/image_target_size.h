// The size an image is resized to, its padding and its patch grid (shared/spec/vision.md §3.2,
// `navit_resize_image` of the K3 image processor), in IEEE double arithmetic as the reference does.
#pragma once
#include <cstdint>
#include <string>

#include "vision/image_config.h"

namespace k3::vision {

/// One image's sizes, in pixels (width, height) and patches (grid_h, grid_w).
struct TargetSize {
  int64_t width0 = 0, height0 = 0;  ///< W0, H0: the decoded image
  int64_t width = 0, height = 0;    ///< W1, H1: after the resize (equal to W0, H0 when none is needed)
  int64_t pad_w = 0, pad_h = 0;     ///< zero columns on the right, rows at the bottom
  int64_t grid_h = 0, grid_w = 0;   ///< patches per column / row: (H1 + pad_h) / P, (W1 + pad_w) / P

  bool resized() const { return width != width0 || height != height0; }
  /// Image tokens after the M x M merge: (grid_h / M) * (grid_w / M).
  int64_t n_tokens(int64_t merge) const { return (grid_h / merge) * (grid_w / merge); }
};

/// Spec §3.2 with P = patch_size, M = merge_kernel_size, L = in_patch_limit,
/// S = patch_limit_on_one_side:
///   scale = min(1, sqrt(L / (max(1, W0/P) * max(1, H0/P))), S*P / W0, S*P / H0)   (doubles)
///   W1 = min(max(1, trunc(W0 * scale)), S*P), likewise H1; pad each to a multiple of P*M.
/// Errors (k3::Error naming the image): W0 or H0 < 1; a grid side over S (possible when S*P is
/// not a multiple of P*M): "too many patches per side".
TargetSize navit_target_size(int64_t width0, int64_t height0, const ImagePreprocessConfig& cfg,
                             const std::string& name);

}  // namespace k3::vision
