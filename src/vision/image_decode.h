// Image decoding: PNG (libpng), JPEG (libjpeg-turbo) and WebP (libwebp) bytes -> pixels in the
// mode Pillow opens them in (shared/spec/vision.md §3.1: K3 keeps the native mode until after the
// resize). The format is detected from the magic bytes, never from a file name. EXIF orientation
// is ignored (spec §3.1.2). Animated PNG / WebP: the first frame, as Pillow opens it.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "vision/image_config.h"

namespace k3::vision {

enum class ImageFormat { kPng, kJpeg, kWebp };

/// Pillow's image modes that PNG, JPEG and WebP decode to (Debian's Pillow 9.4 was checked):
/// - k1: PNG gray 1-bit; one byte per pixel, 0 or 255.
/// - kL: gray 8-bit (PNG gray 2/4-bit scaled by 85 / 17; gray JPEG).
/// - kI: PNG gray 16-bit; int32 per pixel (`pixels_i`), 0..65535.
/// - kP: PNG palette; one palette index per pixel, `palette` / `palette_alpha` give the colours.
/// - kLA: PNG gray + alpha 8-bit; bytes L, A.
/// - kRGB: PNG RGB (16-bit: high bytes), colour JPEG, WebP without alpha.
/// - kRGBA: PNG RGBA (16-bit: high bytes), PNG gray + alpha 16-bit (high bytes L, L, L, A),
///   WebP with alpha (not premultiplied).
/// - kCMYK: 4-component JPEG, inverted as Pillow does ("Adobe" polarity: stored 255 - v).
enum class ImageMode { k1, kL, kI, kP, kLA, kRGB, kRGBA, kCMYK };

/// Bytes per pixel of `pixels` for a mode (kI: 0, its pixels are in `pixels_i`).
int mode_channels(ImageMode m);
/// Pillow's mode name: "1", "L", "I", "P", "LA", "RGB", "RGBA", "CMYK".
const char* mode_name(ImageMode m);
/// "PNG", "JPEG", "WebP".
const char* format_name(ImageFormat f);

/// One decoded image in its native mode.
struct DecodedImage {
  ImageFormat format = ImageFormat::kPng;
  ImageMode mode = ImageMode::kRGB;
  int64_t width = 0;
  int64_t height = 0;
  /// uint8 [height, width, mode_channels(mode)] (all modes but kI).
  std::vector<uint8_t> pixels;
  /// int32 [height, width] (mode kI only).
  std::vector<int32_t> pixels_i;
  /// Mode kP: RGB of each of the 256 indices; entries the file's palette does not define are gray
  /// (i, i, i), as Pillow fills them.
  std::array<uint8_t, 256 * 3> palette{};
  /// Mode kP: alpha of each index from the tRNS chunk (indices past its end: 255).
  std::array<uint8_t, 256> palette_alpha{};
  /// Mode kP: the file has a tRNS chunk (Pillow's info["transparency"]).
  bool has_palette_alpha = false;
  /// Mode kP: entries the file's PLTE defines (the rest of `palette` is the Pillow <= 12 gray fill).
  int palette_size = 0;
  /// Modes k1, kL, kI: the tRNS gray key as stored in the file (Pillow compares it with the pixel
  /// value after conversion to 8-bit RGB, so a key of a 1/2/4-bit image is compared unscaled).
  std::optional<int32_t> transparent_key;
};

/// Identifies the format from the first bytes. Errors (k3::Error naming `name`): no known
/// signature; the message gives the first bytes in hex and names GIF, BMP, TIFF, ICO, HEIF/AVIF
/// when it recognises them ("unsupported format").
ImageFormat detect_image_format(std::span<const uint8_t> bytes, const std::string& name);

/// Decodes `bytes`. The byte count is checked against limits.max_bytes first, then the header's
/// width * height against limits.max_source_pixels, before any pixel data is decoded. Errors
/// (k3::Error, "image <name>: ..."): empty input, unsupported format, over a limit (the numbers
/// and the limit), zero width or height, truncated or corrupt data (the library's message).
DecodedImage decode_image(std::span<const uint8_t> bytes, const std::string& name, const ImageLimits& limits);

/// The per-format decoders behind decode_image (format already detected, limits.max_bytes
/// already checked).
DecodedImage decode_png(std::span<const uint8_t> bytes, const std::string& name, const ImageLimits& limits);
DecodedImage decode_jpeg(std::span<const uint8_t> bytes, const std::string& name, const ImageLimits& limits);
DecodedImage decode_webp(std::span<const uint8_t> bytes, const std::string& name, const ImageLimits& limits);

/// Refuses a header size: zero width or height, or width * height over limits.max_source_pixels
/// (k3::Error "image <name>: ..." with the numbers and the limit).
void check_image_size(int64_t width, int64_t height, const std::string& name, const char* format,
                      const ImageLimits& limits);

}  // namespace k3::vision
