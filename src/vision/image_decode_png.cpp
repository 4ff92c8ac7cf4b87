// PNG -> DecodedImage with libpng, in the mode Pillow opens the file in (image_decode.h).
// libpng reports errors by longjmp: every call that can raise one runs inside a small function
// that holds setjmp and only trivially destructible locals, and returns false on an error.
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "vision/image_decode.h"

namespace k3::vision {
namespace {

struct PngSource {
  const uint8_t* data = nullptr;
  std::size_t size = 0;
  std::size_t pos = 0;
  char message[256] = {0};
};

void on_png_error(png_structp png, png_const_charp msg) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(src->message, sizeof src->message, "%s", msg ? msg : "error");
  png_longjmp(png, 1);
}

void on_png_warning(png_structp, png_const_charp) {}

void on_png_read(png_structp png, png_bytep out, std::size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > src->size - src->pos) png_error(png, "truncated: the data ends before the image does");
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

struct PngHeader {
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0, interlace = 0;
};

bool read_header(png_structp png, png_infop info, PngHeader* h) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  png_get_IHDR(png, info, &h->width, &h->height, &h->bit_depth, &h->color_type, &h->interlace, nullptr, nullptr);
  return true;
}

// Samples of 1, 2 and 4 bits unpacked to one byte each (values unscaled); 16-bit samples stay
// big-endian pairs; no other transformation (no gamma, no palette expansion).
bool set_transforms(png_structp png, png_infop info, const PngHeader& h, std::size_t* rowbytes) {
  if (setjmp(png_jmpbuf(png))) return false;
  if (h.bit_depth < 8) png_set_packing(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  *rowbytes = png_get_rowbytes(png, info);
  return true;
}

bool read_rows(png_structp png, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  return true;
}

struct PngGuard {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngGuard() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

}  // namespace

DecodedImage decode_png(std::span<const uint8_t> bytes, const std::string& name, const ImageLimits& limits) {
  PngSource src;
  src.data = bytes.data();
  src.size = bytes.size();
  PngGuard g;
  g.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, on_png_error, on_png_warning);
  if (!g.png) throw Error("image " + name + ": PNG: libpng could not start");
  g.info = png_create_info_struct(g.png);
  if (!g.info) throw Error("image " + name + ": PNG: libpng could not start");
  png_set_read_fn(g.png, &src, on_png_read);
  // Sizes are checked against limits.max_source_pixels below, with the numbers in the message.
  png_set_user_limits(g.png, PNG_UINT_31_MAX, PNG_UINT_31_MAX);
  auto fail = [&](const char* stage) {
    return Error("image " + name + ": corrupt or truncated PNG (" + stage + "): " + src.message);
  };
  PngHeader h;
  if (!read_header(g.png, g.info, &h)) throw fail("header");
  check_image_size(h.width, h.height, name, "PNG", limits);

  DecodedImage im;
  im.format = ImageFormat::kPng;
  im.width = h.width;
  im.height = h.height;
  const int bd = h.bit_depth;
  const int ct = h.color_type;
  int samples = 0;  // samples per pixel in the file
  switch (ct) {
    case PNG_COLOR_TYPE_GRAY:
      samples = 1;
      im.mode = bd == 1 ? ImageMode::k1 : bd == 16 ? ImageMode::kI : ImageMode::kL;
      break;
    case PNG_COLOR_TYPE_GRAY_ALPHA:  // 16-bit: Pillow opens it as RGBA (L replicated)
      samples = 2;
      im.mode = bd == 16 ? ImageMode::kRGBA : ImageMode::kLA;
      break;
    case PNG_COLOR_TYPE_RGB:
      samples = 3;
      im.mode = ImageMode::kRGB;
      break;
    case PNG_COLOR_TYPE_RGB_ALPHA:
      samples = 4;
      im.mode = ImageMode::kRGBA;
      break;
    case PNG_COLOR_TYPE_PALETTE:
      samples = 1;
      im.mode = ImageMode::kP;
      break;
    default: throw Error("image " + name + ": PNG color type " + std::to_string(ct) + " is not a PNG color type");
  }
  std::size_t rowbytes = 0;
  if (!set_transforms(g.png, g.info, h, &rowbytes)) throw fail("header");
  const std::size_t bytes_per_sample = bd == 16 ? 2 : 1;
  if (rowbytes != static_cast<std::size_t>(h.width) * samples * bytes_per_sample)
    throw Error("image " + name + ": PNG: unexpected row size " + std::to_string(rowbytes));
  std::vector<uint8_t> raw(rowbytes * h.height);
  std::vector<png_bytep> rows(h.height);
  for (png_uint_32 y = 0; y < h.height; ++y) rows[y] = raw.data() + y * rowbytes;
  if (!read_rows(g.png, rows.data())) throw fail("pixel data");

  const std::size_t n = static_cast<std::size_t>(h.width) * h.height;
  if (im.mode == ImageMode::kI) {
    im.pixels_i.resize(n);
    for (std::size_t i = 0; i < n; ++i) im.pixels_i[i] = (int32_t{raw[2 * i]} << 8) | raw[2 * i + 1];
  } else if (ct == PNG_COLOR_TYPE_GRAY_ALPHA && bd == 16) {  // high bytes, as L, L, L, A
    im.pixels.resize(n * 4);
    for (std::size_t i = 0; i < n; ++i) {
      im.pixels[4 * i] = im.pixels[4 * i + 1] = im.pixels[4 * i + 2] = raw[4 * i];
      im.pixels[4 * i + 3] = raw[4 * i + 2];
    }
  } else if (bd == 16) {  // Pillow keeps the high byte of each sample
    im.pixels.resize(n * samples);
    for (std::size_t i = 0; i < n * samples; ++i) im.pixels[i] = raw[2 * i];
  } else {
    im.pixels = std::move(raw);
    if (ct == PNG_COLOR_TYPE_GRAY && bd < 8) {
      const int scale = bd == 1 ? 255 : bd == 2 ? 85 : 17;
      for (uint8_t& v : im.pixels) v = static_cast<uint8_t>(v * scale);
    }
  }

  if (ct == PNG_COLOR_TYPE_GRAY && png_get_valid(g.png, g.info, PNG_INFO_tRNS)) {
    png_color_16p key = nullptr;
    png_get_tRNS(g.png, g.info, nullptr, nullptr, &key);
    if (key) im.transparent_key = key->gray;
  }
  if (ct == PNG_COLOR_TYPE_PALETTE) {
    for (int i = 0; i < 256; ++i) {
      im.palette[3 * i] = im.palette[3 * i + 1] = im.palette[3 * i + 2] = static_cast<uint8_t>(i);
      im.palette_alpha[i] = 255;
    }
    png_colorp pal = nullptr;
    int n_pal = 0;
    if (png_get_PLTE(g.png, g.info, &pal, &n_pal) && pal) {
      im.palette_size = std::min(n_pal, 256);
      for (int i = 0; i < n_pal && i < 256; ++i) {
        im.palette[3 * i] = pal[i].red;
        im.palette[3 * i + 1] = pal[i].green;
        im.palette[3 * i + 2] = pal[i].blue;
      }
    }
    if (png_get_valid(g.png, g.info, PNG_INFO_tRNS)) {
      png_bytep alpha = nullptr;
      int n_alpha = 0;
      png_get_tRNS(g.png, g.info, &alpha, &n_alpha, nullptr);
      im.has_palette_alpha = true;
      for (int i = 0; alpha && i < n_alpha && i < 256; ++i) im.palette_alpha[i] = alpha[i];
    }
  }
  return im;
}

}  // namespace k3::vision
