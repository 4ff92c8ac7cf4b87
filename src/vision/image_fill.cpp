// fill_transparent_to_rgb (image_fill.h; shared/spec/vision.md §3.1). Built with
// -ffp-contract=off (src/vision/CMakeLists.txt): composite_over must not fuse.
#include "vision/image_fill.h"

#include <algorithm>

namespace k3::vision {
namespace {

// The 8-bit gray value Pillow converts a pixel of mode 1, L or I to.
uint8_t gray8(const DecodedImage& im, std::size_t i) {
  if (im.mode == ImageMode::kI) return static_cast<uint8_t>(std::clamp<int32_t>(im.pixels_i[i], 0, 255));
  return im.pixels[i];
}

// a * b / 255 rounded, in integers (Pillow's MULDIV255).
unsigned muldiv255(unsigned a, unsigned b) {
  const unsigned t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

// Pixel i as Pillow's convert("RGBA"): out[0..3].
void rgba_of(const DecodedImage& im, std::size_t i, PillowCompat pillow, uint8_t* out) {
  const uint8_t* p = im.pixels.data();
  switch (im.mode) {
    case ImageMode::k1:
    case ImageMode::kL:
    case ImageMode::kI: {
      const uint8_t g = gray8(im, i);
      out[0] = out[1] = out[2] = g;
      out[3] = (im.transparent_key && *im.transparent_key == g) ? 0 : 255;
      return;
    }
    case ImageMode::kP: {
      const uint8_t idx = p[i];
      if (pillow == PillowCompat::kPillow13 && idx >= im.palette_size) std::fill_n(out, 3, uint8_t{0});
      else std::copy_n(&im.palette[3 * idx], 3, out);
      out[3] = im.has_palette_alpha ? im.palette_alpha[idx] : 255;
      return;
    }
    case ImageMode::kLA:
      out[0] = out[1] = out[2] = p[2 * i];
      out[3] = p[2 * i + 1];
      return;
    case ImageMode::kRGB:
      std::copy_n(p + 3 * i, 3, out);
      out[3] = 255;
      return;
    case ImageMode::kRGBA: std::copy_n(p + 4 * i, 4, out); return;
    case ImageMode::kCMYK: {
      const unsigned nk = 255u - p[4 * i + 3];
      for (int c = 0; c < 3; ++c)
        out[c] = static_cast<uint8_t>(std::min(255u, nk - std::min(nk, muldiv255(p[4 * i + c], nk))));
      out[3] = 255;
      return;
    }
  }
}

bool has_alpha(const DecodedImage& im) {
  switch (im.mode) {
    case ImageMode::kLA:
    case ImageMode::kRGBA: return true;
    case ImageMode::kP: return im.has_palette_alpha;
    case ImageMode::k1:
    case ImageMode::kL:
    case ImageMode::kI: return im.transparent_key.has_value();
    case ImageMode::kRGB:
    case ImageMode::kCMYK: return false;
  }
  return false;
}

}  // namespace

uint8_t chessboard_value(int64_t x, int64_t y, const ImagePreprocessConfig& cfg) {
  const int64_t s = cfg.chessboard_square_size;
  const int64_t parity = (y / s + x / s) % 2;
  const bool gray = parity == (cfg.chessboard_square_on_top_left ? 1 : 0);
  return static_cast<uint8_t>(gray ? cfg.chessboard_gray_value : cfg.chessboard_white_value);
}

uint8_t composite_over(uint8_t v, uint8_t a, uint8_t bg) {
  const float alpha = static_cast<float>(a) / 255.0f;
  const float t1 = alpha * static_cast<float>(v);
  const float t2 = (1.0f - alpha) * static_cast<float>(bg);
  const float sum = t1 + t2;
  return static_cast<uint8_t>(sum);  // in [0, 255]: truncation toward zero
}

std::vector<uint8_t> fill_transparent_to_rgb(const DecodedImage& im, const ImagePreprocessConfig& cfg) {
  const std::size_t n = static_cast<std::size_t>(im.width) * static_cast<std::size_t>(im.height);
  if (im.mode == ImageMode::kRGB) return im.pixels;
  std::vector<uint8_t> rgb(n * 3);
  const bool alpha = has_alpha(im);
  uint8_t px[4];
  for (int64_t y = 0; y < im.height; ++y)
    for (int64_t x = 0; x < im.width; ++x) {
      const std::size_t i = static_cast<std::size_t>(y * im.width + x);
      rgba_of(im, i, cfg.pillow, px);
      if (alpha) {
        const uint8_t bg = chessboard_value(x, y, cfg);
        for (int c = 0; c < 3; ++c) rgb[3 * i + c] = composite_over(px[c], px[3], bg);
      } else {
        std::copy_n(px, 3, &rgb[3 * i]);
      }
    }
  return rgb;
}

}  // namespace k3::vision
