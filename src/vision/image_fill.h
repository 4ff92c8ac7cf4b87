// The transparency fill of the K3 image processor (`fill_transparent_bg_with`,
// shared/spec/vision.md §3.1 and its correction 3): any mode -> 8-bit RGB, with transparent
// pixels composited over a chessboard the size of the (resized) image.
#pragma once
#include <cstdint>
#include <vector>

#include "vision/image_config.h"
#include "vision/image_decode.h"

namespace k3::vision {

/// The chessboard value at pixel (x, y): white, except squares where
/// (floor(y / size) + floor(x / size)) mod 2 == (on_top_left ? 1 : 0), which are gray.
uint8_t chessboard_value(int64_t x, int64_t y, const ImagePreprocessConfig& cfg);

/// One composited channel: trunc(f32(a) / 255 * v + (1 - f32(a) / 255) * bg), every operation
/// rounded to float32 (no fused multiply-add), the cast truncating.
uint8_t composite_over(uint8_t v, uint8_t a, uint8_t bg);

/// Image -> uint8 [height, width, 3] (R, G, B):
/// - RGB: unchanged (a PNG tRNS colour key of an RGB image is ignored, as in the reference);
/// - no alpha band and no transparency entry: Pillow's convert("RGB") (palette lookup: indices past
///   the PLTE read gray (i, i, i) or, with cfg.pillow = kPillow13, black; gray
///   replicated, mode I clipped to [0, 255], CMYK: (255 - k) - round((255 - k) * c / 255));
/// - otherwise Pillow's convert("RGBA") (a gray key makes the pixels equal to it after the
///   8-bit conversion transparent; palette alpha per index) composited over the chessboard.
std::vector<uint8_t> fill_transparent_to_rgb(const DecodedImage& im, const ImagePreprocessConfig& cfg);

}  // namespace k3::vision
