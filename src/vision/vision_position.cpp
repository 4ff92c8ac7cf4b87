#include "vision/vision_position.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "io/vision_config.h"

namespace k3::vision {

std::vector<BilinearTap> bilinear_taps(int64_t in, int64_t out) {
  if (in < 1 || out < 1)
    throw Error("bilinear resize: sizes must be >= 1, found " + std::to_string(in) + " -> " + std::to_string(out));
  std::vector<BilinearTap> t(static_cast<size_t>(out));
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  for (int64_t i = 0; i < out; ++i) {
    double s = scale * (static_cast<double>(i) + 0.5) - 0.5;
    if (s < 0) s = 0;
    BilinearTap& b = t[static_cast<size_t>(i)];
    b.i0 = static_cast<int64_t>(std::floor(s));
    if (b.i0 > in - 1) b.i0 = in - 1;
    b.i1 = b.i0 + 1 < in ? b.i0 + 1 : in - 1;
    b.lambda = s - static_cast<double>(b.i0);
  }
  return t;
}

std::vector<float> interpolate_pos_emb(const float* table, int64_t Hpe, int64_t Wpe, int64_t D, int64_t h, int64_t w) {
  if (Hpe < 1 || Wpe < 1 || D < 1 || h < 1 || w < 1)
    throw Error("position embedding: sizes must be >= 1 (table " + std::to_string(Hpe) + "x" + std::to_string(Wpe) +
                "x" + std::to_string(D) + ", grid " + std::to_string(h) + "x" + std::to_string(w) + ")");
  std::vector<float> q(static_cast<size_t>(h * w * D));
  if (h == Hpe && w == Wpe) {
    q.assign(table, table + h * w * D);
    return q;
  }
  const std::vector<BilinearTap> rt = bilinear_taps(Hpe, h), ct = bilinear_taps(Wpe, w);
  for (int64_t i = 0; i < h; ++i) {
    const BilinearTap& a = rt[static_cast<size_t>(i)];
    for (int64_t j = 0; j < w; ++j) {
      const BilinearTap& b = ct[static_cast<size_t>(j)];
      const double w00 = (1 - a.lambda) * (1 - b.lambda), w01 = (1 - a.lambda) * b.lambda;
      const double w10 = a.lambda * (1 - b.lambda), w11 = a.lambda * b.lambda;
      const float* e00 = table + (a.i0 * Wpe + b.i0) * D;
      const float* e01 = table + (a.i0 * Wpe + b.i1) * D;
      const float* e10 = table + (a.i1 * Wpe + b.i0) * D;
      const float* e11 = table + (a.i1 * Wpe + b.i1) * D;
      float* out = q.data() + (i * w + j) * D;
      for (int64_t d = 0; d < D; ++d)
        out[d] = static_cast<float>(w00 * e00[d] + w01 * e01[d] + w10 * e10[d] + w11 * e11[d]);
    }
  }
  return q;
}

Rope2D::Rope2D(int64_t dh, int64_t h, int64_t w) : dh_(dh), h_(h), w_(w), F_(dh / 4) {
  if (dh < 4 || dh % 4 != 0)
    throw Error("2D RoPE: head dim " + std::to_string(dh) + " is not a positive multiple of 4 (vision.md §4.3)");
  if (h < 1 || w < 1 || h > kVisionRopeMaxGrid || w > kVisionRopeMaxGrid)
    throw Error("2D RoPE: grid " + std::to_string(h) + "x" + std::to_string(w) + " outside 1.." +
                std::to_string(kVisionRopeMaxGrid) + " per side (vision.md §3.2, §4.3)");
  freq_.resize(static_cast<size_t>(F_));
  for (int64_t k = 0; k < F_; ++k)
    freq_[static_cast<size_t>(k)] = std::pow(kVisionRopeTheta, -4.0 * static_cast<double>(k) / static_cast<double>(dh));
  auto fill = [&](int64_t n, std::vector<float>& cs, std::vector<float>& sn) {
    cs.resize(static_cast<size_t>(n * F_));
    sn.resize(static_cast<size_t>(n * F_));
    for (int64_t p = 0; p < n; ++p)
      for (int64_t k = 0; k < F_; ++k) {
        const double phi = static_cast<double>(p) * freq_[static_cast<size_t>(k)];
        cs[static_cast<size_t>(p * F_ + k)] = static_cast<float>(std::cos(phi));
        sn[static_cast<size_t>(p * F_ + k)] = static_cast<float>(std::sin(phi));
      }
  };
  fill(h, cos_r_, sin_r_);
  fill(w, cos_c_, sin_c_);
}

void Rope2D::rotate(float* x, int64_t r, int64_t c) const {
  const float* cc = cos_c_.data() + c * F_;
  const float* sc = sin_c_.data() + c * F_;
  const float* cr = cos_r_.data() + r * F_;
  const float* sr = sin_r_.data() + r * F_;
  for (int64_t k = 0; k < F_; ++k) {
    float* p = x + 4 * k;  // slot 2k: dims (4k, 4k+1) by the column; slot 2k+1: (4k+2, 4k+3) by the row
    const float a0 = p[0], a1 = p[1], b0 = p[2], b1 = p[3];
    p[0] = a0 * cc[k] - a1 * sc[k];
    p[1] = a0 * sc[k] + a1 * cc[k];
    p[2] = b0 * cr[k] - b1 * sr[k];
    p[3] = b0 * sr[k] + b1 * cr[k];
  }
}

double Rope2D::angle(int64_t slot, int64_t r, int64_t c) const {
  const double f = freq_.at(static_cast<size_t>(slot / 2));
  return static_cast<double>(slot % 2 == 0 ? c : r) * f;
}

}  // namespace k3::vision
