// Pillow-compatible BICUBIC and NEAREST resampling (image_resize.h; shared/spec/vision.md §3.3).
#include "vision/image_resize.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace k3::vision {
namespace {

constexpr int kPrecisionBits = 22;  // fixed-point weights of 8-bit images: 32 - 8 - 2

// Keys' cubic convolution kernel with a = -0.5, evaluated in Horner form.
double cubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// The taps of one axis: output i reads inputs first[i] .. first[i] + count[i] - 1 with weights
// w[i * ksize + j] (normalised to sum 1).
struct Taps {
  int64_t ksize = 0;
  std::vector<int64_t> first, count;
  std::vector<double> w;
  std::vector<int32_t> fixed;  // round-half-away(w * 2^22)
};

Taps bicubic_taps(int64_t in, int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double filterscale = std::max(scale, 1.0);
  const double support = 2.0 * filterscale;
  const double inv = 1.0 / filterscale;
  Taps t;
  t.ksize = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(out);
  t.count.resize(out);
  t.w.assign(static_cast<std::size_t>(out * t.ksize), 0.0);
  for (int64_t i = 0; i < out; ++i) {
    const double center = (static_cast<double>(i) + 0.5) * scale;
    const int64_t lo = std::max<int64_t>(0, static_cast<int64_t>(center - support + 0.5));
    const int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in);
    const int64_t n = std::min(hi - lo, t.ksize);
    double* k = &t.w[static_cast<std::size_t>(i * t.ksize)];
    double sum = 0.0;
    for (int64_t x = 0; x < n; ++x) {
      k[x] = cubic((static_cast<double>(x + lo) - center + 0.5) * inv);
      sum += k[x];
    }
    if (sum != 0.0)
      for (int64_t x = 0; x < n; ++x) k[x] /= sum;
    t.first[i] = lo;
    t.count[i] = std::max<int64_t>(n, 0);
  }
  t.fixed.resize(t.w.size());
  const double one = static_cast<double>(1 << kPrecisionBits);
  for (std::size_t j = 0; j < t.w.size(); ++j)
    t.fixed[j] = static_cast<int32_t>(t.w[j] < 0 ? -0.5 + t.w[j] * one : 0.5 + t.w[j] * one);
  return t;
}

uint8_t clip8(int64_t acc) {
  const int64_t v = acc >> kPrecisionBits;  // arithmetic shift: floor division by 2^22
  return static_cast<uint8_t>(std::clamp<int64_t>(v, 0, 255));
}

int32_t round_half_away(double v) {
  return static_cast<int32_t>(v >= 0.0 ? std::floor(v + 0.5) : -std::floor(std::fabs(v) + 0.5));
}

// The horizontal pass of interleaved 8-bit channels: [h, w, CH] -> [h, out, CH].
template <int CH>
std::vector<uint8_t> horizontal_u8(std::span<const uint8_t> in, int64_t w, int64_t h, const Taps& t) {
  const int64_t out_w = static_cast<int64_t>(t.first.size());
  std::vector<uint8_t> out(static_cast<std::size_t>(out_w * h * CH));
  for (int64_t y = 0; y < h; ++y) {
    const uint8_t* row = in.data() + static_cast<std::size_t>(y * w * CH);
    uint8_t* dst = out.data() + static_cast<std::size_t>(y * out_w * CH);
    for (int64_t x = 0; x < out_w; ++x) {
      const int32_t* k = &t.fixed[static_cast<std::size_t>(x * t.ksize)];
      const uint8_t* src = row + t.first[x] * CH;
      int64_t acc[CH];
      for (int c = 0; c < CH; ++c) acc[c] = int64_t{1} << (kPrecisionBits - 1);
      for (int64_t j = 0; j < t.count[x]; ++j)
        for (int c = 0; c < CH; ++c) acc[c] += int64_t{src[j * CH + c]} * k[j];
      for (int c = 0; c < CH; ++c) dst[x * CH + c] = clip8(acc[c]);
    }
  }
  return out;
}

// The vertical pass of 8-bit values, rows of `row_len` bytes: [h, row_len] -> [out, row_len].
std::vector<uint8_t> vertical_u8(std::span<const uint8_t> in, int64_t row_len, const Taps& t) {
  const int64_t out_h = static_cast<int64_t>(t.first.size());
  std::vector<uint8_t> out(static_cast<std::size_t>(out_h * row_len));
  std::vector<int64_t> acc(static_cast<std::size_t>(row_len));
  for (int64_t y = 0; y < out_h; ++y) {
    std::fill(acc.begin(), acc.end(), int64_t{1} << (kPrecisionBits - 1));
    const int32_t* k = &t.fixed[static_cast<std::size_t>(y * t.ksize)];
    for (int64_t j = 0; j < t.count[y]; ++j) {
      const uint8_t* src = in.data() + static_cast<std::size_t>((t.first[y] + j) * row_len);
      const int64_t kj = k[j];
      for (int64_t i = 0; i < row_len; ++i) acc[i] += int64_t{src[i]} * kj;
    }
    uint8_t* dst = out.data() + static_cast<std::size_t>(y * row_len);
    for (int64_t i = 0; i < row_len; ++i) dst[i] = clip8(acc[i]);
  }
  return out;
}

std::vector<uint8_t> horizontal_u8_any(std::span<const uint8_t> in, int64_t w, int64_t h, int ch, const Taps& t) {
  switch (ch) {
    case 1: return horizontal_u8<1>(in, w, h, t);
    case 2: return horizontal_u8<2>(in, w, h, t);
    case 3: return horizontal_u8<3>(in, w, h, t);
    default: return horizontal_u8<4>(in, w, h, t);
  }
}

std::vector<int32_t> pass_i32(const std::vector<int32_t>& in, int64_t w, int64_t h, const Taps& t, bool horizontal) {
  const int64_t out_n = static_cast<int64_t>(t.first.size());
  const int64_t w_out = horizontal ? out_n : w, h_out = horizontal ? h : out_n;
  std::vector<int32_t> out(static_cast<std::size_t>(w_out * h_out));
  for (int64_t y = 0; y < h_out; ++y)
    for (int64_t x = 0; x < w_out; ++x) {
      const int64_t i = horizontal ? x : y;
      const double* k = &t.w[static_cast<std::size_t>(i * t.ksize)];
      double acc = 0.0;
      for (int64_t j = 0; j < t.count[i]; ++j) {
        const int64_t sx = horizontal ? t.first[i] + j : x, sy = horizontal ? y : t.first[i] + j;
        acc += static_cast<double>(in[static_cast<std::size_t>(sy * w + sx)]) * k[j];
      }
      out[static_cast<std::size_t>(y * w_out + x)] = round_half_away(acc);
    }
  return out;
}

std::vector<int64_t> nearest_index(int64_t in, int64_t out) {
  const double step = static_cast<double>(in) / static_cast<double>(out);
  std::vector<int64_t> idx(static_cast<std::size_t>(out));
  double s = step * 0.5;
  for (int64_t i = 0; i < out; ++i) {
    idx[static_cast<std::size_t>(i)] = std::clamp<int64_t>(static_cast<int64_t>(s), 0, in - 1);
    s += step;
  }
  return idx;
}

// a * b / 255 rounded, in integers (Pillow's premultiplication).
uint8_t muldiv255(unsigned a, unsigned b) {
  const unsigned t = a * b + 128;
  return static_cast<uint8_t>(((t >> 8) + t) >> 8);
}

// In place: colour channels (all but the last) times alpha / 255.
void premultiply(std::vector<uint8_t>& px, int ch) {
  for (std::size_t p = 0; p + ch <= px.size(); p += ch)
    for (int c = 0; c + 1 < ch; ++c) px[p + c] = muldiv255(px[p + c], px[p + ch - 1]);
}

// In place: colour channels divided by alpha / 255 (integer division, clipped to 255); alpha 0 and
// 255 leave the colour as it is.
void unpremultiply(std::vector<uint8_t>& px, int ch) {
  for (std::size_t p = 0; p + ch <= px.size(); p += ch) {
    const unsigned a = px[p + ch - 1];
    if (a == 0 || a == 255) continue;
    for (int c = 0; c + 1 < ch; ++c) px[p + c] = static_cast<uint8_t>(std::min(255u, (255u * px[p + c]) / a));
  }
}

}  // namespace

bool pillow13_vertical_first(int64_t w0, int64_t h0, int64_t w1, int64_t h1) {
  return h0 - h1 > 0 && h0 - h1 > 2 * (w0 - w1);
}

std::vector<uint8_t> resize_bicubic_u8(std::span<const uint8_t> in, int64_t w0, int64_t h0, int channels, int64_t w1,
                                       int64_t h1, PillowCompat pillow) {
  if (channels < 1 || channels > 4)
    throw Error("resize_bicubic_u8: expected 1 to 4 channels, found " + std::to_string(channels));
  if (w1 == w0 && h1 == h0) return std::vector<uint8_t>(in.begin(), in.end());
  if (h1 == h0) return horizontal_u8_any(in, w0, h0, channels, bicubic_taps(w0, w1));
  const Taps vt = bicubic_taps(h0, h1);
  if (w1 == w0) return vertical_u8(in, w0 * channels, vt);
  if (pillow == PillowCompat::kPillow13 && pillow13_vertical_first(w0, h0, w1, h1)) {
    const std::vector<uint8_t> tmp = vertical_u8(in, w0 * channels, vt);
    return horizontal_u8_any(tmp, w0, h1, channels, bicubic_taps(w0, w1));
  }
  const std::vector<uint8_t> tmp = horizontal_u8_any(in, w0, h0, channels, bicubic_taps(w0, w1));
  return vertical_u8(tmp, w1 * channels, vt);
}

std::vector<int32_t> resize_bicubic_i32(std::span<const int32_t> in, int64_t w0, int64_t h0, int64_t w1, int64_t h1,
                                        PillowCompat pillow) {
  std::vector<int32_t> cur(in.begin(), in.end());
  const bool vertical_first = pillow == PillowCompat::kPillow13 && pillow13_vertical_first(w0, h0, w1, h1);
  if (vertical_first && h1 != h0) cur = pass_i32(cur, w0, h0, bicubic_taps(h0, h1), false);
  const int64_t h_now = vertical_first ? h1 : h0;
  if (w1 != w0) cur = pass_i32(cur, w0, h_now, bicubic_taps(w0, w1), true);
  if (!vertical_first && h1 != h0) cur = pass_i32(cur, w1, h0, bicubic_taps(h0, h1), false);
  return cur;
}

std::vector<uint8_t> resize_nearest_u8(std::span<const uint8_t> in, int64_t w0, int64_t h0, int channels, int64_t w1,
                                       int64_t h1) {
  const std::vector<int64_t> xi = nearest_index(w0, w1), yi = nearest_index(h0, h1);
  std::vector<uint8_t> out(static_cast<std::size_t>(w1 * h1 * channels));
  for (int64_t y = 0; y < h1; ++y)
    for (int64_t x = 0; x < w1; ++x)
      for (int c = 0; c < channels; ++c)
        out[static_cast<std::size_t>((y * w1 + x) * channels + c)] =
            in[static_cast<std::size_t>((yi[y] * w0 + xi[x]) * channels + c)];
  return out;
}

DecodedImage resize_image(const DecodedImage& im, int64_t w1, int64_t h1, PillowCompat pillow) {
  if (w1 == im.width && h1 == im.height) return im;
  DecodedImage out;  // everything but the pixels
  out.format = im.format;
  out.mode = im.mode;
  out.palette = im.palette;
  out.palette_alpha = im.palette_alpha;
  out.has_palette_alpha = im.has_palette_alpha;
  out.palette_size = im.palette_size;
  out.transparent_key = im.transparent_key;
  out.width = w1;
  out.height = h1;
  const int ch = mode_channels(im.mode);
  switch (im.mode) {
    case ImageMode::k1:
    case ImageMode::kP: out.pixels = resize_nearest_u8(im.pixels, im.width, im.height, ch, w1, h1); break;
    case ImageMode::kI: out.pixels_i = resize_bicubic_i32(im.pixels_i, im.width, im.height, w1, h1, pillow); break;
    case ImageMode::kLA:
    case ImageMode::kRGBA: {
      std::vector<uint8_t> pre = im.pixels;
      premultiply(pre, ch);
      out.pixels = resize_bicubic_u8(pre, im.width, im.height, ch, w1, h1, pillow);
      unpremultiply(out.pixels, ch);
      break;
    }
    case ImageMode::kL:
    case ImageMode::kRGB:
    case ImageMode::kCMYK: out.pixels = resize_bicubic_u8(im.pixels, im.width, im.height, ch, w1, h1, pillow); break;
  }
  return out;
}

}  // namespace k3::vision
