// Unit values of the scalar reference kernels (src/kernels/ref): SiTU, MXFP4 decode, linear
// maps, norms, softmax.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "kernels/ref/activations.h"
#include "kernels/ref/linear.h"
#include "kernels/ref/mxfp4_linear.h"
#include "kernels/ref/norms.h"
#include "test_util.h"

namespace {

TEST(RefKernels, SituUnitValues) {
  // β1 = 4, β2 = 25 (K3 config), spec §3.4. Tolerance 1e-6 absolute (printed to 6 decimals).
  EXPECT_NEAR(k3::ref::situ(1.f, 1.f, 4.f, 25.f), 0.715818, 1e-6);
  EXPECT_NEAR(k3::ref::situ(-1.f, 2.f, 4.f, 25.f), -0.525829, 1e-6);
  EXPECT_NEAR(k3::ref::situ(10.f, 100.f, 4.f, 25.f), 98.590782, 2e-5);  // ≈ 1e-7 relative
  EXPECT_EQ(k3::ref::situ(0.f, 5.f, 4.f, 25.f), 0.f);
  // Without the linear beta the up branch is untransformed.
  const double s = 4.0 * std::tanh(0.25) / (1.0 + std::exp(-1.0));
  EXPECT_NEAR(k3::ref::situ(1.f, 3.f, 4.f, std::nullopt), 3.0 * s, 1e-6);
}

TEST(RefKernels, SigmoidSiluSoftplusExtremes) {
  EXPECT_EQ(k3::ref::sigmoid(-1000.f), 0.f);
  EXPECT_EQ(k3::ref::sigmoid(1000.f), 1.f);
  EXPECT_FLOAT_EQ(k3::ref::sigmoid(0.f), 0.5f);
  EXPECT_NEAR(k3::ref::silu(2.f), 2.0 / (1.0 + std::exp(-2.0)), 1e-7);
  EXPECT_NEAR(k3::ref::softplus(0.f), std::log(2.0), 1e-7);
  EXPECT_FLOAT_EQ(k3::ref::softplus(100.f), 100.f);
  EXPECT_GE(k3::ref::softplus(-100.f), 0.f);
}

TEST(RefKernels, Mxfp4ByteDecode) {
  float e = 0, o = 0;
  k3::ref::mxfp4_decode_byte(0x72, 128, &e, &o);
  EXPECT_EQ(e, 2.0f);
  EXPECT_EQ(o, 12.0f);
  k3::ref::mxfp4_decode_byte(0xF9, 127, &e, &o);
  EXPECT_EQ(e, -0.5f);
  EXPECT_EQ(o, -6.0f);
  EXPECT_THROW(k3::ref::mxfp4_decode_byte(0x11, 0xFF, &e, &o), k3::Error);
  // Scale byte 0 is 2^-127 (subnormal), not zero.
  k3::ref::mxfp4_decode_byte(0x02, 0, &e, &o);
  EXPECT_EQ(e, std::ldexp(1.0f, -127));
  EXPECT_EQ(o, 0.f);
}

TEST(RefKernels, Mxfp4MatvecMatchesDecodedRowsAndRejectsNanScale) {
  const int64_t rows = 3, cols = 64;
  std::vector<uint8_t> packed(rows * cols / 2), scale(rows * cols / 32);
  std::mt19937 rng(7);
  for (auto& b : packed) b = static_cast<uint8_t>(rng());
  for (auto& s : scale) s = static_cast<uint8_t>(120 + rng() % 12);
  k3::Mxfp4Matrix m{packed.data(), scale.data(), rows, cols};
  std::vector<float> x = k3test::randn(cols, rng), y(rows), row(cols);
  k3::ref::matvec_mxfp4(m, x.data(), y.data());
  for (int64_t r = 0; r < rows; ++r) {
    k3::ref::mxfp4_decode_row(m, r, row.data());
    double acc = 0;
    for (int64_t c = 0; c < cols; ++c) acc += static_cast<double>(row[c]) * x[c];
    EXPECT_NEAR(y[r], acc, 1e-5 * (1 + std::fabs(acc)));
  }
  // Nibble order: byte 0x21 → element 0 = 0.5, element 1 = 1.0 (scale 127 = 1.0).
  packed[0] = 0x21;
  scale[0] = 127;
  k3::ref::mxfp4_decode_row(m, 0, row.data());
  EXPECT_EQ(row[0], 0.5f);
  EXPECT_EQ(row[1], 1.0f);
  scale[scale.size() - 1] = 0xFF;
  try {
    k3::ref::matvec_mxfp4(m, x.data(), y.data(), "expert 5 w1");
    FAIL() << "expected k3::Error";
  } catch (const k3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert 5 w1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("row 2"), std::string::npos) << e.what();
  }
}

TEST(RefKernels, Bf16MatvecRowsAndTranspose) {
  std::mt19937 rng(1);
  k3test::OwnedBf16 w("w", 5, 7, rng);
  std::vector<float> x = k3test::randn(7, rng), y(5), xt = k3test::randn(3, rng), yt(7);
  k3::ref::matvec(w.view, x.data(), y.data());
  for (int r = 0; r < 5; ++r) {
    double acc = 0;
    for (int c = 0; c < 7; ++c) acc += static_cast<double>(w.at(r, c)) * x[c];
    EXPECT_NEAR(y[r], acc, 1e-6);
  }
  k3::ref::matvec_t_rows(w.view, 1, 3, xt.data(), yt.data());
  for (int c = 0; c < 7; ++c) {
    double acc = 0;
    for (int i = 0; i < 3; ++i) acc += static_cast<double>(w.at(1 + i, c)) * xt[i];
    EXPECT_NEAR(yt[c], acc, 1e-6);
  }
  EXPECT_THROW(k3::ref::matvec_rows(w.view, 3, 3, x.data(), y.data()), k3::Error);
  k3::TensorView bad = w.view;
  bad.dtype = k3::DType::I32;
  EXPECT_THROW(k3::ref::matvec(bad, x.data(), y.data()), k3::Error);
}

TEST(RefKernels, NormsAndSoftmax) {
  const float x[4] = {1.f, -2.f, 3.f, 0.5f};
  const float w[4] = {1.f, 2.f, 0.5f, 1.f};
  float out[4];
  k3::ref::rmsnorm(x, 4, w, 1e-5f, out);
  const double ms = (1 + 4 + 9 + 0.25) / 4.0;
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], w[i] * x[i] / std::sqrt(ms + 1e-5), 1e-6);
  k3::ref::l2norm(x, 4, 1e-6f, out);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], x[i] / std::sqrt(14.25 + 1e-6), 1e-7);
  const float l[3] = {1000.f, 1000.f, -1000.f};
  k3::ref::softmax(l, 3, out);
  EXPECT_FLOAT_EQ(out[0], 0.5f);
  EXPECT_FLOAT_EQ(out[1], 0.5f);
  EXPECT_EQ(out[2], 0.f);
}

}  // namespace
