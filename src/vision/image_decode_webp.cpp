// WebP -> DecodedImage with libwebp's animation decoder (the decoder Pillow uses for every WebP
// file, still or animated): the first frame composed on the canvas, RGBA not premultiplied. The
// mode is RGBA when the bitstream has alpha, else RGB (Pillow's "RGBX" read as RGB).
#include <webp/decode.h>
#include <webp/demux.h>

#include <cstring>

#include "core/error.h"
#include "vision/image_decode.h"

namespace k3::vision {
namespace {

const char* status_text(VP8StatusCode s) {
  switch (s) {
    case VP8_STATUS_OK: return "ok";
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "user abort";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "not enough data (truncated)";
  }
  return "unknown status";
}

struct AnimGuard {
  WebPAnimDecoder* dec = nullptr;
  ~AnimGuard() { WebPAnimDecoderDelete(dec); }
};

}  // namespace

DecodedImage decode_webp(std::span<const uint8_t> bytes, const std::string& name, const ImageLimits& limits) {
  WebPBitstreamFeatures features;
  const VP8StatusCode st = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (st != VP8_STATUS_OK)
    throw Error("image " + name + ": corrupt or truncated WebP (header): libwebp: " + status_text(st));
  check_image_size(features.width, features.height, name, "WebP", limits);

  WebPAnimDecoderOptions opt;
  if (!WebPAnimDecoderOptionsInit(&opt)) throw Error("image " + name + ": WebP: libwebp version mismatch");
  opt.color_mode = MODE_RGBA;
  opt.use_threads = 0;
  WebPData data{bytes.data(), bytes.size()};
  AnimGuard g;
  g.dec = WebPAnimDecoderNew(&data, &opt);
  if (!g.dec)
    throw Error("image " + name + ": corrupt or truncated WebP: libwebp could not parse the container (" +
                std::to_string(bytes.size()) + " bytes)");
  WebPAnimInfo info;
  if (!WebPAnimDecoderGetInfo(g.dec, &info)) throw Error("image " + name + ": WebP: libwebp gave no canvas info");
  check_image_size(info.canvas_width, info.canvas_height, name, "WebP", limits);
  uint8_t* rgba = nullptr;
  int timestamp = 0;
  if (!WebPAnimDecoderGetNext(g.dec, &rgba, &timestamp) || !rgba)
    throw Error("image " + name + ": corrupt or truncated WebP: libwebp could not decode the first frame");

  DecodedImage im;
  im.format = ImageFormat::kWebp;
  im.width = info.canvas_width;
  im.height = info.canvas_height;
  const std::size_t n = static_cast<std::size_t>(im.width) * im.height;
  if (features.has_alpha) {
    im.mode = ImageMode::kRGBA;
    im.pixels.assign(rgba, rgba + n * 4);
  } else {
    im.mode = ImageMode::kRGB;
    im.pixels.resize(n * 3);
    for (std::size_t i = 0; i < n; ++i) std::memcpy(&im.pixels[3 * i], rgba + 4 * i, 3);
  }
  return im;
}

}  // namespace k3::vision
