// One preprocessed image as the vision tower takes it: the patch grid and its normalised patches
// (shared/spec/vision.md §3.4, the output of `navit_patchify` for one image, t = 1).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace k3::vision {

/// Patch edge in pixels (`patch_size` of preprocessor_config.json; K3: 14).
inline constexpr int64_t kPatchSize = 14;
/// Values per patch: 3 channels x 14 x 14 = 588.
inline constexpr int64_t kPatchValues = 3 * kPatchSize * kPatchSize;

/// The patches of one image.
/// - `grid_h`, `grid_w`: the patch grid (rows, columns); both are multiples of the merge kernel (2),
///   so the tower emits (grid_h / 2) * (grid_w / 2) image tokens.
/// - `patches`: float32 [grid_h * grid_w, 3, 14, 14]: patch n = r * grid_w + c (row-major over the
///   grid); inside a patch the flat index is ch * 196 + ky * 14 + kx, channels R, G, B; values are
///   (v / 255 - 0.5) / 0.5 with the spec's float64-then-float32 rounding (padding pixels are -1.0).
/// - `width`, `height`: the decoded image's size in pixels before any resize (for messages).
/// - `name`: where the image came from (a path or "image 2 of the request"), for error messages.
struct ImagePatches {
  int64_t grid_h = 0;
  int64_t grid_w = 0;
  std::vector<float> patches;
  int64_t width = 0;
  int64_t height = 0;
  std::string name;

  /// Image tokens after the 2x2 merge: (grid_h / 2) * (grid_w / 2).
  int64_t n_tokens() const { return (grid_h / 2) * (grid_w / 2); }
};

}  // namespace k3::vision
