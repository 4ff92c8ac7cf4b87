// The tower's position pieces against plain double formulas (vision.md §4.2, §4.3): bilinear
// taps and the interpolated table (align_corners = false, no antialias, the spec's worked
// examples), the 2D RoPE's frequencies, axis order (column at even slots, row at odd), rotation
// and its relative-position property. Tolerances: taps exact; values 1e-6 relative (fp32 storage
// of double results).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "vision/vision_position.h"

using namespace k3::vision;

TEST(VisionPosition, BilinearTapsFollowTheSpecExamples) {
  const auto t32 = bilinear_taps(64, 32);  // row i reads (2i, 2i+1) with λ = 0.5
  for (int64_t i = 0; i < 32; ++i) {
    EXPECT_EQ(t32[i].i0, 2 * i);
    EXPECT_EQ(t32[i].i1, 2 * i + 1);
    EXPECT_DOUBLE_EQ(t32[i].lambda, 0.5);
  }
  const auto t26 = bilinear_taps(64, 26);
  EXPECT_EQ(t26[0].i0, 0);
  EXPECT_NEAR(t26[0].lambda, 0.730769, 1e-6);
  EXPECT_EQ(t26[1].i0, 3);
  EXPECT_NEAR(t26[1].lambda, 0.192308, 1e-6);
  EXPECT_EQ(t26[25].i0, 62);
  EXPECT_NEAR(t26[25].lambda, 0.269231, 1e-6);
  const auto t100 = bilinear_taps(64, 100);  // upsampling: row 0 clamps to s = 0, row 99 reads (63, 63)
  EXPECT_EQ(t100[0].i0, 0);
  EXPECT_DOUBLE_EQ(t100[0].lambda, 0.0);
  EXPECT_EQ(t100[99].i0, 63);
  EXPECT_EQ(t100[99].i1, 63);
  const auto same = bilinear_taps(5, 5);
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(same[i].i0, i);
    EXPECT_DOUBLE_EQ(same[i].lambda, 0.0);
  }
  EXPECT_THROW(bilinear_taps(0, 3), k3::Error);
}

TEST(VisionPosition, InterpolatedTableMatchesTheFormula) {
  const int64_t Hpe = 6, Wpe = 4, D = 3;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> E(Hpe * Wpe * D);
  for (float& v : E) v = nd(rng);
  // same size: the table itself, bit for bit
  EXPECT_EQ(interpolate_pos_emb(E.data(), Hpe, Wpe, D, Hpe, Wpe), E);
  auto src = [](int64_t in, int64_t out, int64_t i) {
    return std::max(0.0, static_cast<double>(in) / out * (i + 0.5) - 0.5);
  };
  for (auto [h, w] : {std::pair<int64_t, int64_t>{2, 2}, {4, 6}, {10, 8}, {6, 2}, {12, 12}}) {
    const std::vector<float> q = interpolate_pos_emb(E.data(), Hpe, Wpe, D, h, w);
    ASSERT_EQ(q.size(), static_cast<size_t>(h * w * D));
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < w; ++j) {
        const double si = src(Hpe, h, i), sj = src(Wpe, w, j);
        const int64_t i0 = std::min<int64_t>(static_cast<int64_t>(si), Hpe - 1), i1 = std::min(i0 + 1, Hpe - 1);
        const int64_t j0 = std::min<int64_t>(static_cast<int64_t>(sj), Wpe - 1), j1 = std::min(j0 + 1, Wpe - 1);
        const double l = si - i0, m = sj - j0;
        for (int64_t d = 0; d < D; ++d) {
          auto e = [&](int64_t r, int64_t c) { return static_cast<double>(E[(r * Wpe + c) * D + d]); };
          const double want =
              (1 - l) * (1 - m) * e(i0, j0) + (1 - l) * m * e(i0, j1) + l * (1 - m) * e(i1, j0) + l * m * e(i1, j1);
          EXPECT_NEAR(q[(i * w + j) * D + d], want, 1e-6 * (1 + std::abs(want))) << h << "x" << w;
        }
      }
  }
  // a table linear in the row index is reproduced as the clamped source coordinate
  std::vector<float> lin(Hpe * Wpe);
  for (int64_t r = 0; r < Hpe; ++r)
    for (int64_t c = 0; c < Wpe; ++c) lin[r * Wpe + c] = static_cast<float>(r);
  const std::vector<float> q = interpolate_pos_emb(lin.data(), Hpe, Wpe, 1, 9, 4);
  for (int64_t i = 0; i < 9; ++i) EXPECT_NEAR(q[i * 4], std::min(src(Hpe, 9, i), 5.0), 1e-6);
}

TEST(VisionPosition, RopeFrequenciesAndAxisOrder) {
  const Rope2D rope(128, 20, 30);
  // f_k = 10000^(-k/32) (vision.md §4.3): slot 2k by the column, slot 2k+1 by the row
  const double f[] = {1.0, 0.749894209, 0.562341325, 0.421696503};
  for (int k = 0; k < 4; ++k) {
    EXPECT_NEAR(rope.angle(2 * k, 7, 11), 11 * f[k], 1e-8);
    EXPECT_NEAR(rope.angle(2 * k + 1, 7, 11), 7 * f[k], 1e-8);
  }
  EXPECT_NEAR(rope.angle(62, 0, 1), 1.33352143e-4, 1e-12);
  // rotating e = (1, 0) in every slot gives (cos φ, sin φ)
  std::vector<float> x(128);
  for (int j = 0; j < 64; ++j) x[2 * j] = 1.0f;
  rope.rotate(x.data(), 7, 11);
  for (int j = 0; j < 64; ++j) {
    EXPECT_NEAR(x[2 * j], std::cos(rope.angle(j, 7, 11)), 1e-6);
    EXPECT_NEAR(x[2 * j + 1], std::sin(rope.angle(j, 7, 11)), 1e-6);
  }
  // (0, 0) is the identity
  std::vector<float> y(128);
  for (int i = 0; i < 128; ++i) y[i] = static_cast<float>(i) - 60.f;
  std::vector<float> y0 = y;
  rope.rotate(y.data(), 0, 0);
  EXPECT_EQ(y, y0);
}

TEST(VisionPosition, RopeScoresDependOnTheOffsetOnly) {
  const int64_t dh = 16;
  const Rope2D rope(dh, 12, 12);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::vector<float> q(dh), k(dh);
  for (auto& v : q) v = nd(rng);
  for (auto& v : k) v = nd(rng);
  auto score = [&](int64_t r1, int64_t c1, int64_t r2, int64_t c2) {
    std::vector<float> a = q, b = k;
    rope.rotate(a.data(), r1, c1);
    rope.rotate(b.data(), r2, c2);
    double s = 0;
    for (int64_t i = 0; i < dh; ++i) s += static_cast<double>(a[i]) * b[i];
    return s;
  };
  EXPECT_NEAR(score(3, 4, 1, 9), score(5, 6, 3, 11), 1e-5);
  EXPECT_NEAR(score(0, 0, 2, 2), score(9, 9, 11, 11), 1e-5);
  EXPECT_GT(std::abs(score(3, 4, 1, 9) - score(4, 3, 9, 1)), 1e-3);  // rows and columns are not interchangeable
}

TEST(VisionPosition, RopeRefusesBadShapes) {
  EXPECT_THROW(Rope2D(6, 4, 4), k3::Error);
  EXPECT_THROW(Rope2D(0, 4, 4), k3::Error);
  EXPECT_THROW(Rope2D(16, 513, 4), k3::Error);
  EXPECT_THROW(Rope2D(16, 4, 0), k3::Error);
}
