#include "kernels/ref/mxfp4_linear.h"

#include <string>

#include "core/error.h"
#include "core/mxfp4.h"

namespace k3::ref {

namespace {

constexpr int64_t kGroup = 32;

void check_dims(const Mxfp4Matrix& w, std::string_view what) {
  if (w.rows < 0 || w.cols <= 0 || w.cols % kGroup != 0)
    throw Error(std::string(what) + ": MXFP4 matrix needs cols a positive multiple of 32, found [" +
                std::to_string(w.rows) + ", " + std::to_string(w.cols) + "]");
  if ((w.packed == nullptr || w.scale == nullptr) && w.rows > 0)
    throw Error(std::string(what) + ": MXFP4 matrix without data");
}

[[noreturn]] void bad_scale(std::string_view what, int64_t row, int64_t group) {
  throw Error(std::string(what) + ": MXFP4 scale byte 0xFF (E8M0 NaN) at row " + std::to_string(row) + ", group " +
              std::to_string(group) + "; expected 0x00..0xFE");
}

}  // namespace

void mxfp4_decode_byte(uint8_t byte, uint8_t scale, float* even, float* odd) {
  if (!mxfp4_scale_valid(scale)) throw Error("MXFP4 scale byte 0xFF (E8M0 NaN); expected 0x00..0xFE");
  const float s = e8m0_to_f32(scale);
  *even = kE2M1[byte & 0x0F] * s;
  *odd = kE2M1[byte >> 4] * s;
}

void mxfp4_decode_row(const Mxfp4Matrix& w, int64_t row, float* out, std::string_view what) {
  check_dims(w, what);
  if (row < 0 || row >= w.rows)
    throw Error(std::string(what) + ": row " + std::to_string(row) + " outside " + std::to_string(w.rows) + " rows");
  const int64_t n_groups = w.cols / kGroup;
  const uint8_t* packed = w.packed + row * (w.cols / 2);
  const uint8_t* scale = w.scale + row * n_groups;
  for (int64_t g = 0; g < n_groups; ++g) {
    if (!mxfp4_scale_valid(scale[g])) bad_scale(what, row, g);
    const float s = e8m0_to_f32(scale[g]);
    for (int64_t j = 0; j < kGroup / 2; ++j) {
      const uint8_t b = packed[g * (kGroup / 2) + j];
      out[g * kGroup + 2 * j] = kE2M1[b & 0x0F] * s;
      out[g * kGroup + 2 * j + 1] = kE2M1[b >> 4] * s;
    }
  }
}

void matvec_mxfp4(const Mxfp4Matrix& w, const float* x, float* y, std::string_view what) {
  check_dims(w, what);
  const int64_t n_groups = w.cols / kGroup;
  for (int64_t r = 0; r < w.rows; ++r) {
    const uint8_t* packed = w.packed + r * (w.cols / 2);
    const uint8_t* scale = w.scale + r * n_groups;
    double acc = 0.0;
    for (int64_t g = 0; g < n_groups; ++g) {
      if (!mxfp4_scale_valid(scale[g])) bad_scale(what, r, g);
      double part = 0.0;  // Σ E2M1·x over the group, scaled once (exact power of two)
      const float* xg = x + g * kGroup;
      for (int64_t j = 0; j < kGroup / 2; ++j) {
        const uint8_t b = packed[g * (kGroup / 2) + j];
        part += static_cast<double>(kE2M1[b & 0x0F]) * xg[2 * j];
        part += static_cast<double>(kE2M1[b >> 4]) * xg[2 * j + 1];
      }
      acc += part * static_cast<double>(e8m0_to_f32(scale[g]));
    }
    y[r] = static_cast<float>(acc);
  }
}

}  // namespace k3::ref
