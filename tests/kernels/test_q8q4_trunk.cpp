// Trunk quantization kernels (kernels/q8q4_trunk.h): the encoder against its definition, the
// scalar and AVX2 rows against the fp64 oracle ref::matmul_quant on awkward shapes, and a token's
// result independent of the token count (bit for bit).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "kernels/cpu_features.h"
#include "kernels/q8q4_trunk.h"

namespace {

struct Bf16Matrix {
  std::vector<uint16_t> bits;
  k3::TensorView view;
  Bf16Matrix(int64_t rows, int64_t cols, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f / std::sqrt(static_cast<float>(cols)));
    bits.resize(static_cast<size_t>(rows * cols));
    for (auto& b : bits) b = k3::f32_to_bf16(nd(rng));
    bits[3] = k3::f32_to_bf16(0.f);
    view.name = "test.weight";
    view.dtype = k3::DType::BF16;
    view.shape = {rows, cols};
    view.data = reinterpret_cast<const uint8_t*>(bits.data());
    view.nbytes = bits.size() * 2;
  }
  float at(int64_t r, int64_t c) const { return k3::bf16_to_f32(bits[static_cast<size_t>(r * view.shape[1] + c)]); }
};

std::vector<float> randx(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

float decoded(const k3::QuantMatrix& m, int64_t r, int64_t j) {
  const float d = m.d[static_cast<size_t>(r * (m.cols / 32) + j / 32)];
  if (m.kind == k3::QuantKind::Q8) return d * m.q[static_cast<size_t>(r * m.cols + j)];
  const uint8_t b = static_cast<uint8_t>(m.q[static_cast<size_t>((r * m.cols + j) / 2)]);
  const int n = j % 2 == 0 ? (b & 15) : (b >> 4);
  return d * static_cast<float>(n >= 8 ? n - 16 : n);
}

}  // namespace

TEST(TrunkQuant, EncoderWithinHalfAStep) {
  const Bf16Matrix w(13, 96, 1);
  for (k3::QuantKind kind : {k3::QuantKind::Q8, k3::QuantKind::Q4}) {
    const k3::QuantMatrix m = k3::quantize_matrix(w.view, kind);
    const float qmax = kind == k3::QuantKind::Q8 ? 127.f : 7.f;
    ASSERT_EQ(m.d.size(), 13u * 3);
    ASSERT_EQ(m.q.size(), kind == k3::QuantKind::Q8 ? 13u * 96 : 13u * 48);
    for (int64_t r = 0; r < 13; ++r)
      for (int64_t g = 0; g < 3; ++g) {
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(w.at(r, g * 32 + i)));
        const float d = m.d[static_cast<size_t>(r * 3 + g)];
        EXPECT_FLOAT_EQ(d, amax / qmax);
        for (int i = 0; i < 32; ++i) {
          const float v = w.at(r, g * 32 + i), q = decoded(m, r, g * 32 + i);
          EXPECT_LE(std::fabs(q - v), 0.5f * d * 1.0001f) << r << " " << g * 32 + i;
          EXPECT_NEAR(q / d, std::nearbyint(v / d), 1e-3);  // RNE of w/d, exactly representable
        }
      }
  }
}

TEST(TrunkQuant, EncoderErrors) {
  Bf16Matrix w(4, 40, 2);  // 40 columns: not a multiple of 32
  EXPECT_THROW(k3::quantize_matrix(w.view, k3::QuantKind::Q8), k3::Error);
  Bf16Matrix n(2, 32, 3);
  n.bits[5] = 0x7FC0;  // NaN
  try {
    k3::quantize_matrix(n.view, k3::QuantKind::Q4);
    ADD_FAILURE();
  } catch (const k3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("test.weight"), std::string::npos);
  }
}

// Scalar and AVX2 rows vs the fp64 oracle: |y - ref| <= 1e-5 * sum |w x| per output (fp32
// accumulation over up to 224 terms); a token's output identical for T = 1 and inside T = 9.
TEST(TrunkQuant, RowsMatchOracleOnEveryIsa) {
  const bool has_avx2 = k3::cpu_features().avx2;  // AVX2 + FMA + F16C
  for (int64_t cols : {32, 96, 224})
    for (k3::QuantKind kind : {k3::QuantKind::Q8, k3::QuantKind::Q4}) {
      const int64_t rows = 37;
      const Bf16Matrix w(rows, cols, static_cast<unsigned>(cols));
      const k3::QuantMatrix m = k3::quantize_matrix(w.view, kind);
      for (int64_t T : {1, 3, 9}) {
        const auto x = randx(static_cast<size_t>(T * cols), 7);
        std::vector<float> want(static_cast<size_t>(T * rows)), got(want.size());
        k3::ref::matmul_quant(m, x.data(), T, want.data());
        for (int isa = 0; isa < 2; ++isa) {
          if (isa == 1 && !has_avx2) continue;
          SCOPED_TRACE(std::to_string(cols) + " cols, T " + std::to_string(T) + (isa ? " avx2" : " scalar"));
          if (isa == 0) k3::detail::quant_rows_scalar(m, x.data(), T, got.data(), rows, 0, rows);
          else k3::detail::quant_rows_avx2(m, x.data(), T, got.data(), rows, 0, rows);
          for (int64_t t = 0; t < T; ++t)
            for (int64_t r = 0; r < rows; ++r) {
              double mag = 0;
              for (int64_t j = 0; j < cols; ++j)
                mag += std::fabs(decoded(m, r, j) * x[static_cast<size_t>(t * cols + j)]);
              EXPECT_NEAR(got[static_cast<size_t>(t * rows + r)], want[static_cast<size_t>(t * rows + r)],
                          1e-5 * mag + 1e-30);
            }
          // Token t alone gives the same bits as inside the batch.
          for (int64_t t = 0; t < T; ++t) {
            std::vector<float> one(static_cast<size_t>(rows));
            if (isa == 0) k3::detail::quant_rows_scalar(m, x.data() + t * cols, 1, one.data(), rows, 0, rows);
            else k3::detail::quant_rows_avx2(m, x.data() + t * cols, 1, one.data(), rows, 0, rows);
            EXPECT_EQ(std::memcmp(one.data(), got.data() + t * rows, rows * sizeof(float)), 0);
          }
        }
      }
      // The dispatched, threaded entry equals the oracle within the same bound on T = 5.
      const auto x = randx(static_cast<size_t>(5 * cols), 8);
      std::vector<float> want(static_cast<size_t>(5 * rows)), got(want.size());
      k3::ref::matmul_quant(m, x.data(), 5, want.data());
      k3::matmul_quant(m, x.data(), 5, got.data());
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i])));
    }
}
