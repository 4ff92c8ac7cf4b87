// JPEG -> DecodedImage with libjpeg-turbo, decoded with the library's defaults as Pillow decodes
// (integer slow DCT, fancy upsampling, no scaling): gray -> L, three components -> RGB (the
// library's YCbCr conversion), four -> CMYK inverted (Pillow assumes Adobe polarity).
// A file that ends early is an error, as in Pillow (libjpeg would pad it with gray and warn).
// libjpeg reports errors by longjmp: every call that can raise one runs inside a small function
// that holds setjmp and only trivially destructible locals, and returns false on an error.
#include <csetjmp>
#include <cstdio>  // before jpeglib.h, which uses FILE and size_t without including their headers
#include <cstring>

#include <jerror.h>
#include <jpeglib.h>

#include "core/error.h"
#include "vision/image_decode.h"

namespace k3::vision {
namespace {

struct JpegErrors {
  jpeg_error_mgr mgr;  // first member: libjpeg hands back a pointer to it
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void on_jpeg_error(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegErrors*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

void on_jpeg_message(j_common_ptr c, int level) {
  // Running out of data is only a warning to libjpeg; it is an error here.
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) {
    auto* e = reinterpret_cast<JpegErrors*>(c->err);
    std::snprintf(e->message, sizeof e->message, "truncated: the data ends before the image does");
    std::longjmp(e->jump, 1);
  }
}

bool read_header(jpeg_decompress_struct* cinfo, JpegErrors* err, const uint8_t* data, std::size_t size) {
  if (setjmp(err->jump)) return false;
  jpeg_create_decompress(cinfo);
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(cinfo, TRUE);
  return true;
}

bool start(jpeg_decompress_struct* cinfo, JpegErrors* err, J_COLOR_SPACE out) {
  if (setjmp(err->jump)) return false;
  cinfo->out_color_space = out;
  jpeg_start_decompress(cinfo);
  return true;
}

bool read_rows(jpeg_decompress_struct* cinfo, JpegErrors* err, uint8_t* dst, std::size_t row_bytes) {
  if (setjmp(err->jump)) return false;
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = dst + static_cast<std::size_t>(cinfo->output_scanline) * row_bytes;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  return true;
}

// A progressive file may hold any number of scans, each a pass over the whole image; real
// encoders write about ten. More than this is refused (a cheap file could otherwise take minutes).
constexpr int kMaxJpegScans = 1000;

void on_jpeg_progress(j_common_ptr c) {
  if (c->is_decompressor) {
    auto* d = reinterpret_cast<j_decompress_ptr>(c);
    if (d->input_scan_number > kMaxJpegScans) {
      auto* e = reinterpret_cast<JpegErrors*>(c->err);
      std::snprintf(e->message, sizeof e->message, "more than %d progressive scans", kMaxJpegScans);
      std::longjmp(e->jump, 1);
    }
  }
}

struct JpegGuard {
  jpeg_decompress_struct* cinfo;
  ~JpegGuard() { jpeg_destroy_decompress(cinfo); }  // no-op on a struct never created (mem == NULL)
};

}  // namespace

DecodedImage decode_jpeg(std::span<const uint8_t> bytes, const std::string& name, const ImageLimits& limits) {
  jpeg_decompress_struct cinfo;
  std::memset(&cinfo, 0, sizeof cinfo);
  JpegErrors err;
  std::memset(&err, 0, sizeof err);
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = on_jpeg_error;
  err.mgr.emit_message = on_jpeg_message;
  jpeg_progress_mgr progress;
  std::memset(&progress, 0, sizeof progress);
  progress.progress_monitor = on_jpeg_progress;
  JpegGuard guard{&cinfo};
  auto fail = [&](const char* stage) {
    return Error("image " + name + ": corrupt or truncated JPEG (" + stage + "): " + err.message);
  };
  if (!read_header(&cinfo, &err, bytes.data(), bytes.size())) throw fail("header");
  cinfo.progress = &progress;
  check_image_size(cinfo.image_width, cinfo.image_height, name, "JPEG", limits);

  DecodedImage im;
  im.format = ImageFormat::kJpeg;
  im.width = cinfo.image_width;
  im.height = cinfo.image_height;
  J_COLOR_SPACE out = JCS_RGB;
  switch (cinfo.num_components) {
    case 1:
      im.mode = ImageMode::kL;
      out = JCS_GRAYSCALE;
      break;
    case 3:
      im.mode = ImageMode::kRGB;
      out = JCS_RGB;
      break;
    case 4:
      im.mode = ImageMode::kCMYK;
      out = JCS_CMYK;
      break;
    default:
      throw Error("image " + name + ": JPEG with " + std::to_string(cinfo.num_components) +
                  " components; expected 1 (gray), 3 (colour) or 4 (CMYK)");
  }
  if (!start(&cinfo, &err, out)) throw fail("header");
  const int ch = mode_channels(im.mode);
  if (cinfo.output_width != cinfo.image_width || cinfo.output_height != cinfo.image_height ||
      cinfo.output_components != ch)
    throw Error("image " + name + ": JPEG: the decoder's output shape differs from the header");
  const std::size_t row_bytes = static_cast<std::size_t>(im.width) * ch;
  im.pixels.resize(row_bytes * im.height);
  if (!read_rows(&cinfo, &err, im.pixels.data(), row_bytes)) throw fail("pixel data");
  if (im.mode == ImageMode::kCMYK)
    for (uint8_t& v : im.pixels) v = static_cast<uint8_t>(255 - v);
  return im;
}

}  // namespace k3::vision
