// MXFP4 kernels (integer Q8 path and exact fp32 path) of every supported ISA vs an fp64 oracle
// that decodes the packed bytes element by element (algorithms.md §5.1, §5.3, §5.4).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/mxfp4.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace {

using namespace k3test;

struct Mx {
  int64_t rows, cols;
  std::vector<uint8_t> packed, scale;
  k3::Mxfp4Matrix m() const { return {packed.data(), scale.data(), rows, cols}; }
  double w(int64_t r, int64_t c) const {  // exact decoded weight
    const uint8_t byte = packed[r * (cols / 2) + c / 2];
    const int nib = (c % 2 == 0) ? (byte & 15) : (byte >> 4);
    return static_cast<double>(k3::kE2M1[nib]) * k3::e8m0_to_f32(scale[r * (cols / 32) + c / 32]);
  }
};

Mx rand_mx(std::mt19937& g, int64_t rows, int64_t cols, int emin = 118, int emax = 130) {
  Mx m{rows, cols, rand_u8(g, rows * cols / 2), rand_u8(g, rows * cols / 32, emin, emax)};
  return m;
}

// Oracle on the exact weights: y[t, r] = Σ_c w[r, c]·x[t, c] in fp64, and Σ|terms|.
void oracle(const Mx& m, const std::vector<float>& x, int64_t t, std::vector<double>& y, std::vector<double>& mag) {
  y.assign(t * m.rows, 0);
  mag.assign(t * m.rows, 0);
  for (int64_t j = 0; j < t; ++j)
    for (int64_t r = 0; r < m.rows; ++r)
      for (int64_t c = 0; c < m.cols; ++c) {
        const double p = m.w(r, c) * x[j * m.cols + c];
        y[j * m.rows + r] += p;
        mag[j * m.rows + r] += std::fabs(p);
      }
}

const int64_t kShapes[][3] = {  // rows, cols, tokens (cols/32 odd and even; T over the 4-token block)
    {1, 32, 1},  {3, 96, 1},   {17, 160, 1}, {5, 64, 2}, {7, 96, 3},
    {4, 224, 4}, {9, 3584, 1}, {6, 288, 5},  {2, 32, 9}, {0, 32, 2}};

TEST(Mxfp4, ExactF32PathEveryIsa) {
  std::mt19937 g(3);
  for (k3::Isa isa : isas_under_test()) {
    const k3::KernelTable& kt = k3::kernels_for(isa);
    for (auto& s : kShapes) {
      Mx m = rand_mx(g, s[0], s[1]);
      const int64_t t = s[2];
      auto x = rand_f32(g, t * m.cols);
      std::vector<float> y(t * m.rows, -999.f);
      kt.gemm_mxfp4_f32(m.packed.data(), m.scale.data(), m.cols, x.data(), m.cols, t, y.data(), m.rows, 0, m.rows);
      std::vector<double> ref, mag;
      oracle(m, x, t, ref, mag);
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_LE(std::fabs(y[i] - ref[i]), Tol::kMxfp4F32 * mag[i] + 1e-30)
            << kt.isa_name << " rows=" << m.rows << " cols=" << m.cols << " T=" << t << " i=" << i;
    }
  }
}

TEST(Mxfp4, QuantizeQ8IsBitIdenticalAcrossIsasAndInNibbleOrder) {
  std::mt19937 g(4);
  auto x = rand_f32(g, 32 * 7, -3.f, 3.f);
  for (int i = 0; i < 32; ++i) x[64 + i] = 0.f;      // all-zero block: s = 0, q = 0
  x[100] = std::numeric_limits<float>::quiet_NaN();  // block 3 poisoned
  x[200] = std::numeric_limits<float>::infinity();   // block 6 poisoned
  std::vector<int8_t> q0(x.size());
  std::vector<float> s0(x.size() / 32);
  k3::kernels_for(k3::Isa::Scalar).quantize_q8(x.data(), x.size(), q0.data(), s0.data());
  // nibble order and rounding, checked on the scalar kernel
  for (int b = 0; b < 7; ++b) {
    if (b == 3 || b == 6) {
      EXPECT_TRUE(std::isnan(s0[b]));
      for (int p = 0; p < 32; ++p) EXPECT_EQ(q0[32 * b + p], 0);
      continue;
    }
    for (int p = 0; p < 32; ++p) {
      const int i = p < 16 ? 2 * p : 2 * (p - 16) + 1;
      EXPECT_LE(std::fabs(s0[b] * q0[32 * b + p] - x[32 * b + i]), 0.5 * s0[b] * 1.0001 + 1e-30);
    }
  }
  for (k3::Isa isa : isas_under_test()) {
    std::vector<int8_t> q(x.size());
    std::vector<float> s(x.size() / 32);
    k3::kernels_for(isa).quantize_q8(x.data(), x.size(), q.data(), s.data());
    EXPECT_EQ(q, q0) << k3::isa_name(isa);
    for (size_t b = 0; b < s.size(); ++b)
      if (!std::isnan(s0[b])) EXPECT_EQ(s[b], s0[b]) << k3::isa_name(isa) << " block " << b;
      else EXPECT_TRUE(std::isnan(s[b]));
  }
}

TEST(Mxfp4, IntegerPathEveryIsa) {
  std::mt19937 g(5);
  for (k3::Isa isa : isas_under_test()) {
    const k3::KernelTable& kt = k3::kernels_for(isa);
    for (auto& s : kShapes) {
      Mx m = rand_mx(g, s[0], s[1]);
      const int64_t t = s[2], nb = m.cols / 32;
      auto x = rand_f32(g, t * m.cols);
      std::vector<int8_t> q(t * m.cols);
      std::vector<float> qs(t * nb);
      for (int64_t j = 0; j < t; ++j)
        kt.quantize_q8(x.data() + j * m.cols, m.cols, q.data() + j * m.cols, qs.data() + j * nb);
      std::vector<float> y(t * m.rows, -999.f);
      const int64_t mid = m.rows / 2;
      kt.gemm_mxfp4_q8(m.packed.data(), m.scale.data(), m.cols, q.data(), qs.data(), t, y.data(), m.rows, 0, mid);
      kt.gemm_mxfp4_q8(m.packed.data(), m.scale.data(), m.cols, q.data(), qs.data(), t, y.data(), m.rows, mid, m.rows);
      std::vector<double> ref, mag;
      oracle(m, x, t, ref, mag);
      for (int64_t j = 0; j < t; ++j)
        for (int64_t r = 0; r < m.rows; ++r) {
          // (a) vs fp64 of the quantized activations: only fp32 scale/accumulation rounding
          double yq = 0, magq = 0, bound = 0;
          for (int64_t c = 0; c < m.cols; ++c) {
            const int64_t b = c / 32, i = c % 32;
            const int64_t p = (i % 2 == 0) ? i / 2 : 16 + i / 2;
            const double a = static_cast<double>(qs[j * nb + b]) * q[j * m.cols + 32 * b + p];
            yq += m.w(r, c) * a;
            magq += std::fabs(m.w(r, c) * a);
            bound += 0.5 * qs[j * nb + b] * std::fabs(m.w(r, c));
          }
          const double yv = y[j * m.rows + r];
          ASSERT_LE(std::fabs(yv - yq), Tol::kMxfp4Q8Int * magq + 1e-30)
              << kt.isa_name << " rows=" << m.rows << " cols=" << m.cols << " T=" << t;
          // (b) vs the exact float dot: bounded by the activation rounding (§5.4)
          const double i_ref = ref[j * m.rows + r];
          ASSERT_LE(std::fabs(yv - i_ref), bound * 1.001 + Tol::kMxfp4Q8Int * mag[j * m.rows + r] + 1e-30)
              << kt.isa_name << " rows=" << m.rows << " cols=" << m.cols << " T=" << t;
        }
    }
  }
}

// Q8 activations of t random tokens with the given ISA's quantizer.
void quantize_tokens(const k3::KernelTable& kt, const std::vector<float>& x, int64_t t, int64_t cols,
                     std::vector<int8_t>& q, std::vector<float>& qs) {
  const int64_t nb = cols / 32;
  q.assign(t * cols, 0);
  qs.assign(t * nb, 0.f);
  for (int64_t j = 0; j < t; ++j) kt.quantize_q8(x.data() + j * cols, cols, q.data() + j * cols, qs.data() + j * nb);
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The AVX2 integer kernel (8-row tiles; T <= 4 decode in registers, larger T through a tile
// buffer) computes every output as the scalar kernel does: Σ over blocks in order of
// float(exact block dot)·(2^(e-128)·s_a), product and sum rounded to fp32. So it is bit-identical
// to the scalar ISA, for every T, every row count (tails of the 8-row tile) and every r0/r1 split,
// and a token's outputs do not depend on the batch it is in. So does the AVX-512 kernel (the AVX2
// one for T <= 4, 16-row transposed VNNI tiles above).
TEST(Mxfp4, IntegerPathTokenBatchesTailsAndSplits) {
  std::mt19937 g(8);
  const k3::KernelTable& scalar = k3::kernels_for(k3::Isa::Scalar);
  const int64_t kTs[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 31, 32, 33, 64, 129};
  struct Case {
    int64_t rows, cols;
  };
  const Case cases[] = {{19, 32}, {21, 64}, {13, 96}, {11, 3584}, {64, 64}};
  for (const Case& c : cases) {
    Mx m = rand_mx(g, c.rows, c.cols);
    const int64_t nb = c.cols / 32;
    for (int64_t t : kTs) {
      if (c.cols == 3584 && t > 33 && t != 129) continue;  // keep the fp64 oracle cheap
      auto x = rand_f32(g, t * c.cols);
      std::vector<int8_t> q;
      std::vector<float> qs;
      quantize_tokens(scalar, x, t, c.cols, q, qs);
      std::vector<float> ys(t * c.rows);
      scalar.gemm_mxfp4_q8(m.packed.data(), m.scale.data(), c.cols, q.data(), qs.data(), t, ys.data(), c.rows, 0,
                           c.rows);
      for (k3::Isa isa : isas_under_test()) {
        const k3::KernelTable& kt = k3::kernels_for(isa);
        const std::string what = std::string(kt.isa_name) + " rows=" + std::to_string(c.rows) +
                                 " cols=" + std::to_string(c.cols) + " T=" + std::to_string(t);
        std::vector<float> y(t * c.rows, -999.f);
        kt.gemm_mxfp4_q8(m.packed.data(), m.scale.data(), c.cols, q.data(), qs.data(), t, y.data(), c.rows, 0, c.rows);
        // vs fp64 of the quantized activations (only the fp32 scale/accumulation rounding)
        for (int64_t j = 0; j < t; ++j)
          for (int64_t r = 0; r < c.rows; ++r) {
            double yq = 0, magq = 0;
            for (int64_t col = 0; col < c.cols; ++col) {
              const int64_t b = col / 32, i = col % 32, p = (i % 2 == 0) ? i / 2 : 16 + i / 2;
              const double a = static_cast<double>(qs[j * nb + b]) * q[j * c.cols + 32 * b + p];
              yq += m.w(r, col) * a;
              magq += std::fabs(m.w(r, col) * a);
            }
            ASSERT_LE(std::fabs(y[j * c.rows + r] - yq), Tol::kMxfp4Q8Int * magq + 1e-30)
                << what << " token " << j << " row " << r;
          }
        if (isa != k3::Isa::Scalar) {  // AVX2 and AVX-512 compute the scalar kernel's formula
          for (size_t i = 0; i < y.size(); ++i)
            ASSERT_TRUE(same_bits(y[i], ys[i])) << what << " i=" << i << ": " << y[i] << " vs scalar " << ys[i];
        }
        // any r0/r1 split: bit-identical rows inside, rows outside untouched
        for (int64_t r0 : {int64_t(0), int64_t(1), int64_t(5), c.rows / 2, c.rows - 1}) {
          for (int64_t r1 : {r0 + 1, r0 + 3, r0 + 9, c.rows}) {
            if (r1 > c.rows || r1 <= r0) continue;
            std::vector<float> yp(t * c.rows, -777.f);
            kt.gemm_mxfp4_q8(m.packed.data(), m.scale.data(), c.cols, q.data(), qs.data(), t, yp.data(), c.rows, r0,
                             r1);
            for (int64_t j = 0; j < t; ++j)
              for (int64_t r = 0; r < c.rows; ++r) {
                const float v = yp[j * c.rows + r];
                if (r < r0 || r >= r1) {
                  ASSERT_EQ(v, -777.f) << what << " wrote row " << r << " outside [" << r0 << ", " << r1 << ")";
                } else {
                  ASSERT_TRUE(same_bits(v, y[j * c.rows + r]))
                      << what << " split [" << r0 << ", " << r1 << ") row " << r;
                }
              }
          }
        }
        // a token's outputs do not depend on the batch: T = 1 calls and a sub-batch give the same bits
        {
          std::vector<float> y1(c.rows);
          for (int64_t j = 0; j < t; ++j) {
            kt.gemm_mxfp4_q8(m.packed.data(), m.scale.data(), c.cols, q.data() + j * c.cols, qs.data() + j * nb, 1,
                             y1.data(), c.rows, 0, c.rows);
            for (int64_t r = 0; r < c.rows; ++r)
              ASSERT_TRUE(same_bits(y1[r], y[j * c.rows + r])) << what << " token " << j << " alone, row " << r;
          }
          if (t > 2) {
            const int64_t j0 = 1, tn = t - 2;  // tokens [1, t-1) as their own batch
            std::vector<float> ysub(tn * c.rows);
            kt.gemm_mxfp4_q8(m.packed.data(), m.scale.data(), c.cols, q.data() + j0 * c.cols, qs.data() + j0 * nb, tn,
                             ysub.data(), c.rows, 0, c.rows);
            for (int64_t i = 0; i < tn * c.rows; ++i)
              ASSERT_TRUE(same_bits(ysub[i], y[j0 * c.rows + i])) << what << " sub-batch i=" << i;
          }
        }
      }
    }
  }
}

// A 0xFF scale byte makes that row's outputs NaN for every token, and a non-finite activation
// block (s = NaN) that token's outputs NaN, whichever path (T <= 4 or the tile buffer) and
// wherever the row sits in its 8-row tile; all other outputs stay finite.
TEST(Mxfp4, IntegerPathNanScaleEveryT) {
  std::mt19937 g(9);
  for (int64_t cols : {int64_t(32), int64_t(96), int64_t(3584)}) {
    const int64_t rows = 19, nb = cols / 32;
    Mx m = rand_mx(g, rows, cols);
    m.scale[13 * nb + nb - 1] = 0xFF;  // row 13 (lane 5 of the second tile), last block
    for (int64_t t : {int64_t(1), int64_t(2), int64_t(4), int64_t(5), int64_t(33)}) {
      auto x = rand_f32(g, t * cols);
      if (t >= 2) x[1 * cols + 7] = std::numeric_limits<float>::quiet_NaN();  // token 1 poisoned
      for (k3::Isa isa : isas_under_test()) {
        const k3::KernelTable& kt = k3::kernels_for(isa);
        std::vector<int8_t> q;
        std::vector<float> qs;
        quantize_tokens(kt, x, t, cols, q, qs);
        std::vector<float> y(t * rows, -999.f);
        kt.gemm_mxfp4_q8(m.packed.data(), m.scale.data(), cols, q.data(), qs.data(), t, y.data(), rows, 0, rows);
        for (int64_t j = 0; j < t; ++j)
          for (int64_t r = 0; r < rows; ++r) {
            const bool nan = r == 13 || (t >= 2 && j == 1);
            EXPECT_EQ(std::isnan(y[j * rows + r]), nan)
                << kt.isa_name << " cols=" << cols << " T=" << t << " token " << j << " row " << r;
            if (!nan) {
              EXPECT_TRUE(std::isfinite(y[j * rows + r]));
            }
          }
      }
    }
  }
}

TEST(Mxfp4, ExtremeScalesAndNibbleOrder) {
  // byte 0x21: element 0 = low nibble 1 (0.5), element 1 = high nibble 2 (1.0); §5.4
  for (uint8_t e : {uint8_t(0x00), uint8_t(0x01), uint8_t(0x7F), uint8_t(0x80), uint8_t(0xFE)}) {
    Mx m{1, 32, std::vector<uint8_t>(16, 0), std::vector<uint8_t>(1, e)};
    m.packed[0] = 0x21;
    std::vector<float> x(32, 0.f);
    x[0] = 1.f;
    x[1] = 0.25f;
    const double expect = (0.5 + 0.25) * k3::e8m0_to_f32(e);
    for (k3::Isa isa : isas_under_test()) {
      const k3::KernelTable& kt = k3::kernels_for(isa);
      float y = -1.f;
      kt.gemm_mxfp4_f32(m.packed.data(), m.scale.data(), 32, x.data(), 32, 1, &y, 1, 0, 1);
      EXPECT_EQ(static_cast<double>(y), expect) << kt.isa_name << " e=" << int(e);
      std::vector<int8_t> q(32);
      float qs = 0;
      kt.quantize_q8(x.data(), 32, q.data(), &qs);
      kt.gemm_mxfp4_q8(m.packed.data(), m.scale.data(), 32, q.data(), &qs, 1, &y, 1, 0, 1);
      EXPECT_NEAR(y, expect, 0.5 * qs * 1.5 * k3::e8m0_to_f32(e) + 1e-45) << kt.isa_name << " e=" << int(e);
    }
  }
}

TEST(Mxfp4, NanScaleByteIsReportedByOps) {
  std::mt19937 g(6);
  Mx m = rand_mx(g, 9, 96);
  m.scale[5 * 3 + 2] = 0xFF;  // row 5, block 2
  auto x = rand_f32(g, 2 * 96);
  std::vector<float> y(2 * 9);
  for (k3::Isa isa : isas_under_test()) {  // kernels turn 0xFF into NaN
    const k3::KernelTable& kt = k3::kernels_for(isa);
    kt.gemm_mxfp4_f32(m.packed.data(), m.scale.data(), 96, x.data(), 96, 2, y.data(), 9, 0, 9);
    EXPECT_TRUE(std::isnan(y[5]) && std::isnan(y[9 + 5]) && std::isfinite(y[4])) << kt.isa_name;
  }
  for (auto path : {k3::Mxfp4Path::Int8, k3::Mxfp4Path::ExactF32}) {
    try {
      k3::matmul_mxfp4(m.m(), x.data(), 2, y.data(), path, "experts.3.w2");
      ADD_FAILURE() << "no error for scale 0xFF";
    } catch (const k3::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("experts.3.w2"), std::string::npos) << msg;
      EXPECT_NE(msg.find("0xFF"), std::string::npos) << msg;
      EXPECT_NE(msg.find("row 5, block 2"), std::string::npos) << msg;
    }
  }
}

TEST(Mxfp4, OpsMatchTablesAndRejectBadShapes) {
  std::mt19937 g(7);
  Mx m = rand_mx(g, 50, 3584 / 4);
  auto x = rand_f32(g, 3 * m.cols);
  std::vector<float> y(3 * m.rows), yf(3 * m.rows);
  k3::matmul_mxfp4(m.m(), x.data(), 3, y.data(), k3::Mxfp4Path::Int8);
  k3::matmul_mxfp4(m.m(), x.data(), 3, yf.data(), k3::Mxfp4Path::ExactF32);
  std::vector<double> ref, mag;
  oracle(m, x, 3, ref, mag);
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_LE(std::fabs(yf[i] - ref[i]), Tol::kMxfp4F32 * mag[i]);
    EXPECT_LE(std::fabs(y[i] - ref[i]), 0.02 * mag[i]);  // int8: ≈ 2^-8 of the block max
  }
  k3::Mxfp4Matrix bad = m.m();
  bad.cols = 40;
  EXPECT_THROW(k3::matmul_mxfp4(bad, x.data(), 1, y.data()), k3::Error);
  k3::Q8Activations xq;
  EXPECT_THROW(k3::quantize_q8(x.data(), 1, 33, xq), k3::Error);
  k3::quantize_q8(x.data(), 1, 64, xq);
  EXPECT_THROW(k3::matmul_mxfp4_q8(m.m(), xq, y.data()), k3::Error);  // cols mismatch
}

}  // namespace
