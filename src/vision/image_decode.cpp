// Format detection by magic bytes, the size checks shared by the decoders, and decode_image.
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "vision/image_decode.h"

namespace k3::vision {
namespace {

bool starts_with(std::span<const uint8_t> b, const char* magic, std::size_t n, std::size_t at = 0) {
  return b.size() >= at + n && std::memcmp(b.data() + at, magic, n) == 0;
}

}  // namespace

int mode_channels(ImageMode m) {
  switch (m) {
    case ImageMode::k1:
    case ImageMode::kL:
    case ImageMode::kP: return 1;
    case ImageMode::kI: return 0;
    case ImageMode::kLA: return 2;
    case ImageMode::kRGB: return 3;
    case ImageMode::kRGBA:
    case ImageMode::kCMYK: return 4;
  }
  return 0;
}

const char* mode_name(ImageMode m) {
  switch (m) {
    case ImageMode::k1: return "1";
    case ImageMode::kL: return "L";
    case ImageMode::kI: return "I";
    case ImageMode::kP: return "P";
    case ImageMode::kLA: return "LA";
    case ImageMode::kRGB: return "RGB";
    case ImageMode::kRGBA: return "RGBA";
    case ImageMode::kCMYK: return "CMYK";
  }
  return "?";
}

const char* format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::kPng: return "PNG";
    case ImageFormat::kJpeg: return "JPEG";
    case ImageFormat::kWebp: return "WebP";
  }
  return "?";
}

ImageFormat detect_image_format(std::span<const uint8_t> b, const std::string& name) {
  if (starts_with(b, "\x89PNG\r\n\x1a\n", 8)) return ImageFormat::kPng;
  if (starts_with(b, "\xff\xd8\xff", 3)) return ImageFormat::kJpeg;
  if (starts_with(b, "RIFF", 4) && starts_with(b, "WEBP", 4, 8)) return ImageFormat::kWebp;
  const char* known = nullptr;
  if (starts_with(b, "GIF87a", 6) || starts_with(b, "GIF89a", 6)) known = "GIF";
  else if (starts_with(b, "BM", 2)) known = "BMP";
  else if (starts_with(b, "II*\0", 4) || starts_with(b, "MM\0*", 4)) known = "TIFF";
  else if (starts_with(b, "\0\0\1\0", 4)) known = "ICO";
  else if (starts_with(b, "ftyp", 4, 4)) known = "HEIF/AVIF (ISO media)";
  else if (starts_with(b, "\xff\x0a", 2) || starts_with(b, "\0\0\0\x0cJXL ", 8)) known = "JPEG XL";
  std::string hex;
  for (std::size_t i = 0; i < b.size() && i < 8; ++i) {
    char buf[4];
    std::snprintf(buf, sizeof buf, "%02x", b[i]);
    if (i) hex += ' ';
    hex += buf;
  }
  throw Error("image " + name + ": unsupported format" + (known ? std::string(" ") + known : std::string()) +
              " (first bytes " + (hex.empty() ? std::string("none") : hex) + "); expected PNG, JPEG or WebP");
}

void check_image_size(int64_t width, int64_t height, const std::string& name, const char* format,
                      const ImageLimits& limits) {
  if (width <= 0 || height <= 0)
    throw Error("image " + name + ": " + format + " header declares a zero size (" + std::to_string(width) + "x" +
                std::to_string(height) + ")");
  const uint64_t pixels = static_cast<uint64_t>(width) * static_cast<uint64_t>(height);
  if (pixels > limits.max_source_pixels)
    throw Error("image " + name + ": " + std::to_string(width) + "x" + std::to_string(height) + " = " +
                std::to_string(pixels) + " pixels is over the limit of " + std::to_string(limits.max_source_pixels) +
                " source pixels");
}

DecodedImage decode_image(std::span<const uint8_t> bytes, const std::string& name, const ImageLimits& limits) {
  if (bytes.empty()) throw Error("image " + name + ": empty (0 bytes)");
  if (bytes.size() > limits.max_bytes)
    throw Error("image " + name + ": " + std::to_string(bytes.size()) + " bytes is over the limit of " +
                std::to_string(limits.max_bytes) + " bytes");
  switch (detect_image_format(bytes, name)) {
    case ImageFormat::kPng: return decode_png(bytes, name, limits);
    case ImageFormat::kJpeg: return decode_jpeg(bytes, name, limits);
    case ImageFormat::kWebp: return decode_webp(bytes, name, limits);
  }
  throw Error("image " + name + ": unsupported format");
}

}  // namespace k3::vision
