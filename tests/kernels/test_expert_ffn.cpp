// mxfp4_glu_ffn (one routed expert over a token group) vs the composition of fp64 oracles, and the
// dtype-dispatching matmul drop-in.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/mxfp4.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/ref/linear.h"

namespace {

using namespace k3test;

struct Mat {
  int64_t rows, cols;
  std::vector<uint8_t> packed, scale;
  k3::Mxfp4Matrix m() const { return {packed.data(), scale.data(), rows, cols}; }
  std::vector<double> apply(const std::vector<double>& x, int64_t t) const {  // fp64 oracle
    std::vector<double> y(t * rows, 0.0);
    for (int64_t j = 0; j < t; ++j)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const uint8_t b = packed[r * (cols / 2) + c / 2];
          const double w = k3::kE2M1[c % 2 ? b >> 4 : b & 15] * k3::e8m0_to_f32(scale[r * (cols / 32) + c / 32]);
          y[j * rows + r] += w * x[j * cols + c];
        }
    return y;
  }
};

TEST(ExpertFfn, MatchesComposedOracleBothPaths) {
  std::mt19937 g(9);
  const int64_t L = 96, I = 64, T = 5;  // latent 3 blocks (odd), expert width 2 blocks
  Mat w1{I, L, rand_u8(g, I * L / 2), rand_u8(g, I * L / 32, 124, 128)};
  Mat w3{I, L, rand_u8(g, I * L / 2), rand_u8(g, I * L / 32, 124, 128)};
  Mat w2{L, I, rand_u8(g, L * I / 2), rand_u8(g, L * I / 32, 124, 128)};
  auto z = rand_f32(g, T * L);
  std::vector<double> zd(z.begin(), z.end());
  auto gd = w1.apply(zd, T), ud = w3.apply(zd, T);
  std::vector<double> h(gd.size());
  for (size_t i = 0; i < h.size(); ++i)
    h[i] = 4.0 * std::tanh(gd[i] / 4.0) / (1.0 + std::exp(-gd[i])) * 25.0 * std::tanh(ud[i] / 25.0);
  auto ref = w2.apply(h, T);
  double ymax = 0;
  for (double v : ref) ymax = std::max(ymax, std::fabs(v));
  ASSERT_GT(ymax, 0.1);
  std::vector<float> y(T * L), y1(L);
  k3::mxfp4_glu_ffn(w1.m(), w3.m(), w2.m(), z.data(), T, k3::GluAct{}, y.data(), k3::Mxfp4Path::ExactF32);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref[i], 1e-4 * ymax) << i;
  k3::mxfp4_glu_ffn(w1.m(), w3.m(), w2.m(), z.data(), T, k3::GluAct{}, y.data(), k3::Mxfp4Path::Int8);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref[i], 0.03 * ymax) << i;  // two int8 roundings
  // a token alone gives (nearly) the same row as inside the group
  k3::mxfp4_glu_ffn(w1.m(), w3.m(), w2.m(), z.data() + 2 * L, 1, k3::GluAct{}, y1.data());
  for (int64_t i = 0; i < L; ++i) EXPECT_NEAR(y1[i], y[2 * L + i], 1e-5 * ymax) << i;
  EXPECT_THROW(k3::mxfp4_glu_ffn(w1.m(), w3.m(), w1.m(), z.data(), T, k3::GluAct{}, y.data()), k3::Error);
}

// An E8M0 scale byte 0xFF (NaN) in any of w1, w3, w2 is reported naming that matrix, on both
// paths and for SiTU with and without the up-branch clamp (the activation must not hide a NaN).
TEST(ExpertFfn, NanScaleInAnyMatrixIsReported) {
  std::mt19937 g(11);
  const int64_t L = 64, I = 64;
  for (int which = 0; which < 3; ++which)
    for (k3::Mxfp4Path path : {k3::Mxfp4Path::Int8, k3::Mxfp4Path::ExactF32})
      for (float b2 : {25.f, 0.f})
        for (int64_t T : {1, 5}) {
          Mat w1{I, L, rand_u8(g, I * L / 2), rand_u8(g, I * L / 32, 124, 128)};
          Mat w3{I, L, rand_u8(g, I * L / 2), rand_u8(g, I * L / 32, 124, 128)};
          Mat w2{L, I, rand_u8(g, L * I / 2), rand_u8(g, L * I / 32, 124, 128)};
          Mat* m[3] = {&w1, &w3, &w2};
          m[which]->scale[3] = 0xFF;  // row 1 (2 blocks per row), block 1
          const auto z = rand_f32(g, T * L);
          std::vector<float> y(T * L);
          k3::GluAct act;
          act.linear_beta = b2;
          const char* names[3] = {"e w1", "e w3", "e w2"};
          try {
            k3::mxfp4_glu_ffn(w1.m(), w3.m(), w2.m(), z.data(), T, act, y.data(), path, "e");
            ADD_FAILURE() << "no error for a NaN scale in " << names[which] << " T=" << T << " b2=" << b2;
          } catch (const k3::Error& e) {
            EXPECT_NE(std::string(e.what()).find(std::string("'") + names[which] + "'"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("row 1, block 1"), std::string::npos) << e.what();
          }
        }
}

TEST(ExpertFfn, SwigluActivation) {
  std::vector<float> g{-3.f, 0.5f, 20.f, -100.f}, u{2.f, -1.f, 0.5f, 3.f}, out(4);
  k3::GluAct a;
  a.situ = false;
  k3::glu_activation(g.data(), u.data(), out.data(), 4, a);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], g[i] / (1.0 + std::exp(-double(g[i]))) * u[i], 1e-6);
}

TEST(Matmul, DispatchesByDtype) {
  std::mt19937 g(10);
  const int64_t rows = 19, cols = 45, t = 3;
  auto wf = rand_f32(g, rows * cols);
  auto x = rand_f32(g, t * cols);
  k3::TensorView v;
  v.name = "f32.w";
  v.dtype = k3::DType::F32;
  v.shape = {rows, cols};
  v.data = reinterpret_cast<const uint8_t*>(wf.data());
  v.nbytes = wf.size() * 4;
  std::vector<float> y(t * rows), ref(t * rows);
  k3::matmul(v, x.data(), t, y.data());
  k3::ref::matmul(v, x.data(), t, ref.data());
  EXPECT_EQ(y, ref);
  auto wb = rand_bf16(g, rows * cols);
  v.dtype = k3::DType::BF16;
  v.data = reinterpret_cast<const uint8_t*>(wb.data());
  v.nbytes = wb.size() * 2;
  k3::matmul(v, x.data(), t, y.data());
  k3::ref::matmul(v, x.data(), t, ref.data());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref[i], 1e-5 * cols);
  v.dtype = k3::DType::U8;
  EXPECT_THROW(k3::matmul(v, x.data(), t, y.data()), k3::Error);
}

}  // namespace
