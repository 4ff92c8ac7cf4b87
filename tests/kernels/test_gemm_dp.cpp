// The pair-chain GEMMs of the 'bf16' and 'mxfp8' numerics modes (kernel_table.h gemm_bf16_dp /
// gemm_mxfp4_dp) for every ISA against an oracle written here, the MXFP8 activation encoding
// (mxfp8.h) against the spec's rule (algorithms.md §5.2), and the ops in the process's mode.
//
// Tolerances: with inputs free of fp32 subnormals, every ISA computes the same chain of exactly
// rounded adds, so results must be bit-identical to the oracle (AVX-512 BF16's DAZ/FTZ only
// differs on subnormals). Against fp64 of the unrounded activations, the bf16 rounding bounds the
// error: |err| <= 2^-8·Σ|w·x| (+ fp32 accumulation, Tol::kGemmBf16DotBf16).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/bf16.h"
#include "core/error.h"
#include "core/mxfp4.h"
#include "kernel_test_util.h"
#include "kernels/mxfp8.h"
#include "kernels/exec_config.h"
#include "kernels/numerics.h"
#include "kernels/ops.h"

namespace {

using namespace k3test;

// The pair chain, as kernel_table.h states it (acc + exact product, rounded to fp32 each step).
float chain(const float* w, const uint16_t* xb, int64_t k) {
  float acc = 0.f;
  auto add = [&](float wv, float xv) { acc = static_cast<float>(double(acc) + double(wv) * double(xv)); };
  for (int64_t i = 0; i < k; i += 2) {
    add(i + 1 < k ? w[i + 1] : 0.f, i + 1 < k ? k3::bf16_to_f32(xb[i + 1]) : 0.f);
    add(w[i], k3::bf16_to_f32(xb[i]));
  }
  return acc;
}

std::vector<uint16_t> to_bf16_padded(const std::vector<float>& x, int64_t t, int64_t k, int64_t& ld) {
  ld = (k + 1) & ~int64_t{1};
  std::vector<uint16_t> xb(static_cast<size_t>(t * ld), 0);
  for (int64_t j = 0; j < t; ++j) k3::round_bf16_row(x.data() + j * k, k, xb.data() + j * ld);
  return xb;
}

float mxfp4_value(const std::vector<uint8_t>& packed, const std::vector<uint8_t>& scale, int64_t k, int64_t r,
                  int64_t i) {
  const uint8_t byte = packed[static_cast<size_t>(r * (k / 2) + i / 2)];
  const int nib = (i & 1) ? byte >> 4 : byte & 15;
  const int e = scale[static_cast<size_t>(r * (k / 32) + i / 32)];
  return static_cast<float>(k3::kE2M1[nib] * std::ldexp(1.0, e - 127));
}

TEST(GemmDp, Bf16EveryIsaBitwiseEqualsPairChain) {
  std::mt19937 g(7);
  const int64_t shapes[][3] = {{1, 1, 1},    {5, 7, 1},    {37, 33, 1},  {13, 250, 2}, {9, 1003, 3},  {33, 300, 13},
                               {3, 2049, 4}, {70, 40, 50}, {31, 64, 12}, {2, 0, 3},    {64, 513, 145}};
  for (auto& s : shapes) {
    const int64_t rows = s[0], k = s[1], t = s[2];
    const auto w = rand_bf16(g, static_cast<size_t>(rows * k));
    const auto x = rand_f32(g, static_cast<size_t>(t * k));
    int64_t ld;
    const auto xb = to_bf16_padded(x, t, k, ld);
    std::vector<float> wf(static_cast<size_t>(k)), ref(static_cast<size_t>(t * rows));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < k; ++i) wf[i] = k3::bf16_to_f32(w[r * k + i]);
      for (int64_t j = 0; j < t; ++j) ref[j * rows + r] = chain(wf.data(), xb.data() + j * ld, k);
    }
    for (k3::Isa isa : isas_under_test()) {
      std::vector<float> y(static_cast<size_t>(t * rows), -7.f);
      k3::kernels_for(isa).gemm_bf16_dp(w.data(), k, k, xb.data(), ld, t, y.data(), rows, 0, rows);
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_EQ(std::memcmp(&y[i], &ref[i], 4), 0) << k3::isa_name(isa) << " rows=" << rows << " K=" << k
                                                     << " T=" << t << " at " << i << ": " << y[i] << " vs " << ref[i];
    }
  }
}

TEST(GemmDp, Mxfp4EveryIsaBitwiseEqualsPairChain) {
  std::mt19937 g(8);
  const int64_t shapes[][3] = {{1, 32, 1},     {5, 64, 1},    {37, 96, 3},   {33, 320, 13},
                               {70, 1024, 17}, {16, 3584, 2}, {40, 288, 145}};
  for (auto& s : shapes) {
    const int64_t rows = s[0], k = s[1], t = s[2];
    const auto packed = rand_u8(g, static_cast<size_t>(rows * k / 2));
    const auto scale = rand_u8(g, static_cast<size_t>(rows * k / 32), 110, 140);
    const auto x = rand_f32(g, static_cast<size_t>(t * k));
    std::vector<uint16_t> xb(static_cast<size_t>(t * k));
    for (int64_t j = 0; j < t; ++j) k3::quantize_mxfp8_bf16(x.data() + j * k, k, xb.data() + j * k);
    std::vector<float> wf(static_cast<size_t>(k)), ref(static_cast<size_t>(t * rows));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < k; ++i) wf[i] = mxfp4_value(packed, scale, k, r, i);
      for (int64_t j = 0; j < t; ++j) ref[j * rows + r] = chain(wf.data(), xb.data() + j * k, k);
    }
    for (k3::Isa isa : isas_under_test()) {
      std::vector<float> y(static_cast<size_t>(t * rows), -7.f);
      k3::kernels_for(isa).gemm_mxfp4_dp(packed.data(), scale.data(), k, xb.data(), k, t, y.data(), rows, 0, rows);
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_EQ(std::memcmp(&y[i], &ref[i], 4), 0) << k3::isa_name(isa) << " rows=" << rows << " K=" << k
                                                     << " T=" << t << " at " << i << ": " << y[i] << " vs " << ref[i];
    }
  }
}

// A token's row alone (decode), inside a batch and under any row split: the same bits.
TEST(GemmDp, BatchAndRowSplitInvariant) {
  std::mt19937 g(9);
  const int64_t rows = 75, k = 544, t = 29;
  const auto w = rand_bf16(g, static_cast<size_t>(rows * k));
  const auto packed = rand_u8(g, static_cast<size_t>(rows * k / 2));
  const auto scale = rand_u8(g, static_cast<size_t>(rows * k / 32), 115, 135);
  const auto x = rand_f32(g, static_cast<size_t>(t * k));
  int64_t ld;
  const auto xb = to_bf16_padded(x, t, k, ld);
  for (k3::Isa isa : isas_under_test()) {
    const k3::KernelTable& kt = k3::kernels_for(isa);
    for (int which = 0; which < 2; ++which) {
      auto run = [&](const uint16_t* xp, int64_t tt, float* y, int64_t r0, int64_t r1) {
        if (which == 0) kt.gemm_bf16_dp(w.data(), k, k, xp, ld, tt, y, rows, r0, r1);
        else kt.gemm_mxfp4_dp(packed.data(), scale.data(), k, xp, ld, tt, y, rows, r0, r1);
      };
      std::vector<float> all(static_cast<size_t>(t * rows)), split(all.size());
      run(xb.data(), t, all.data(), 0, rows);
      run(xb.data(), t, split.data(), 0, 16);
      run(xb.data(), t, split.data(), 16, 49);
      run(xb.data(), t, split.data(), 49, rows);
      EXPECT_EQ(std::memcmp(all.data(), split.data(), all.size() * 4), 0) << k3::isa_name(isa) << " " << which;
      for (int64_t j : {int64_t{0}, int64_t{13}, t - 1}) {
        std::vector<float> one(static_cast<size_t>(rows));
        run(xb.data() + j * ld, 1, one.data(), 0, rows);
        EXPECT_EQ(std::memcmp(one.data(), all.data() + j * rows, rows * 4), 0)
            << k3::isa_name(isa) << " kernel " << which << " token " << j;
      }
    }
  }
}

// Against fp64 of the unrounded activations: the bf16 rounding bound.
TEST(GemmDp, Bf16WithinRoundingBoundOfFp64) {
  std::mt19937 g(10);
  const int64_t rows = 19, k = 700, t = 5;
  const auto w = rand_bf16(g, static_cast<size_t>(rows * k));
  const auto x = rand_f32(g, static_cast<size_t>(t * k));
  int64_t ld;
  const auto xb = to_bf16_padded(x, t, k, ld);
  for (k3::Isa isa : isas_under_test()) {
    std::vector<float> y(static_cast<size_t>(t * rows));
    k3::kernels_for(isa).gemm_bf16_dp(w.data(), k, k, xb.data(), ld, t, y.data(), rows, 0, rows);
    for (int64_t j = 0; j < t; ++j)
      for (int64_t r = 0; r < rows; ++r) {
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < k; ++i) {
          const double p = double(k3::bf16_to_f32(w[r * k + i])) * x[j * k + i];
          ref += p;
          mag += std::fabs(p);
        }
        ASSERT_LE(std::fabs(y[j * rows + r] - ref), Tol::kGemmBf16DotBf16 * mag) << k3::isa_name(isa);
      }
  }
}

TEST(Mxfp8, EncodesTheSpecRule) {
  // block max 3.0: floor(log2 3) = 1, shared_exp = -7, X = 2^-7; 3.0 / X = 384 (E4M3 exact)
  std::vector<float> x(32, 0.f);
  x[0] = 3.f;
  x[1] = 1.f / 3.f;  // 42.67 / 2^7 grid: 1/3·128 = 42.67 -> E4M3 step 4 at [32, 64): 44 -> 0.34375
  x[2] = -0.0041f;   // ·128 = -0.5248: [0.5, 1) step 1/16 -> -0.5 -> -0.00390625
  x[3] = 1e-5f;      // ·128 = 0.00128: subnormal step 2^-9 -> 0.001953125 (RNE of 0.655) -> 2^-9·1
  x[4] = 2.9f;       // 371.2 -> [256, 512) step 32 -> 384 -> 3.0
  std::vector<uint16_t> q(32);
  k3::quantize_mxfp8_bf16(x.data(), 32, q.data());
  EXPECT_EQ(k3::bf16_to_f32(q[0]), 3.f);
  EXPECT_EQ(k3::bf16_to_f32(q[1]), 44.f / 128.f);
  EXPECT_EQ(k3::bf16_to_f32(q[2]), -0.5f / 128.f);
  EXPECT_EQ(k3::bf16_to_f32(q[3]), std::ldexp(1.f, -9) / 128.f);
  EXPECT_EQ(k3::bf16_to_f32(q[4]), 3.f);
  EXPECT_EQ(k3::bf16_to_f32(q[5]), 0.f);
  // saturation: amax 500 -> floor(log2) = 8, X = 1: 500 > 448 saturates
  x.assign(32, 1.f);
  x[7] = -500.f;
  k3::quantize_mxfp8_bf16(x.data(), 32, q.data());
  EXPECT_EQ(k3::bf16_to_f32(q[7]), -448.f);
  EXPECT_EQ(k3::bf16_to_f32(q[0]), 1.f);
  // a non-finite block is all NaN; a zero block all zero; the next block is independent
  std::vector<float> y(64, 0.f);
  y[3] = NAN;
  y[40] = 0.75f;
  std::vector<uint16_t> qy(64);
  k3::quantize_mxfp8_bf16(y.data(), 64, qy.data());
  for (int i = 0; i < 32; ++i) EXPECT_TRUE(std::isnan(k3::bf16_to_f32(qy[i])));
  EXPECT_EQ(k3::bf16_to_f32(qy[40]), 0.75f);
  EXPECT_EQ(k3::bf16_to_f32(qy[41]), 0.f);
}

TEST(Mxfp8, RelativeErrorBound) {
  std::mt19937 g(11);
  const auto x = rand_f32(g, 32 * 200, -3.f, 3.f);
  std::vector<uint16_t> q(x.size());
  k3::quantize_mxfp8_bf16(x.data(), static_cast<int64_t>(x.size()), q.data());
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[32 * b + i]));
    const double s = std::ldexp(1.0, static_cast<int>(std::floor(std::log2(amax))) - 8);
    for (int i = 0; i < 32; ++i) {
      const double v = x[32 * b + i], e = std::fabs(k3::bf16_to_f32(q[32 * b + i]) - v);
      if (std::fabs(v) > 448 * s) continue;  // only the block maximum may saturate
      ASSERT_LE(e, std::fabs(v) >= std::ldexp(s, -6) ? std::ldexp(std::fabs(v), -4) : std::ldexp(s, -10) + 1e-30)
          << "block " << b << " element " << i << " value " << v;
    }
  }
}

// The ops follow the execution context's mode (ctest runs this binary with the process default
// --k3-numerics=mxfp8|bf16|int8, tests/test_main.cpp):
// matmul_bf16 equals the dp kernel on rounded activations in 'bf16', the fp32 kernel otherwise;
// either way a token's row is the same alone and in a batch.
TEST(NumericsMode, OpsFollowTheModeAndStayBatchInvariant) {
  const k3::Numerics mode = k3::numerics_mode();
  std::printf("[numerics] mode %s, mxfp4 path %s\n", k3::numerics_name(mode),
              k3::mxfp4_path_name(k3::exec_context().mxfp4));
  std::mt19937 g(12);
  const int64_t rows = 96, k = 320, t = 40;
  const auto w = rand_bf16(g, static_cast<size_t>(rows * k));
  const auto x = rand_f32(g, static_cast<size_t>(t * k));
  std::vector<float> y(static_cast<size_t>(t * rows)), ref(y.size());
  k3::matmul_bf16_raw(w.data(), rows, k, k, x.data(), t, y.data());
  if (mode == k3::Numerics::Bf16) {
    int64_t ld;
    const auto xb = to_bf16_padded(x, t, k, ld);
    k3::kernels().gemm_bf16_dp(w.data(), k, k, xb.data(), ld, t, ref.data(), rows, 0, rows);
  } else {
    k3::kernels().gemm_bf16(w.data(), k, k, x.data(), k, t, ref.data(), rows, 0, rows);
  }
  EXPECT_EQ(std::memcmp(y.data(), ref.data(), y.size() * 4), 0);
  for (int64_t j : {int64_t{0}, int64_t{21}, t - 1}) {
    std::vector<float> one(static_cast<size_t>(rows));
    k3::matmul_bf16_raw(w.data(), rows, k, k, x.data() + j * k, 1, one.data());
    EXPECT_EQ(std::memcmp(one.data(), y.data() + j * rows, rows * 4), 0) << "token " << j;
  }
  // the MXFP8 expert path: a token alone equals its row in the batch
  const auto packed = rand_u8(g, static_cast<size_t>(rows * k / 2));
  const auto scale = rand_u8(g, static_cast<size_t>(rows * k / 32), 118, 130);
  const k3::Mxfp4Matrix m{packed.data(), scale.data(), rows, k};
  k3::matmul_mxfp4(m, x.data(), t, y.data(), k3::Mxfp4Path::Mxfp8);
  for (int64_t j : {int64_t{0}, int64_t{21}, t - 1}) {
    std::vector<float> one(static_cast<size_t>(rows));
    k3::matmul_mxfp4(m, x.data() + j * k, 1, one.data(), k3::Mxfp4Path::Mxfp8);
    EXPECT_EQ(std::memcmp(one.data(), y.data() + j * rows, rows * 4), 0) << "mxfp8 token " << j;
  }
  // and within the activation-quantization bound of the exact path
  std::vector<float> ye(y.size());
  k3::matmul_mxfp4(m, x.data(), t, ye.data(), k3::Mxfp4Path::ExactF32);
  double num = 0, den = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    num += (y[i] - ye[i]) * double(y[i] - ye[i]);
    den += double(ye[i]) * ye[i];
  }
  EXPECT_LT(std::sqrt(num / den), 0.05);  // E4M3: 2^-4 per element at worst, ~1.5e-2 rel-L2 typical
}

TEST(NumericsMode, ParsesAndRefusesUnknownNames) {
  EXPECT_EQ(k3::parse_numerics("exact", "--numerics"), k3::Numerics::Exact);
  EXPECT_EQ(k3::parse_numerics("mxfp8", "--numerics"), k3::Numerics::Mxfp8);
  EXPECT_EQ(k3::parse_numerics("bf16", "--numerics"), k3::Numerics::Bf16);
  EXPECT_EQ(k3::parse_numerics("int8", "--numerics"), k3::Numerics::Int8);
  for (k3::Numerics n : {k3::Numerics::Exact, k3::Numerics::Mxfp8, k3::Numerics::Bf16, k3::Numerics::Int8})
    EXPECT_EQ(k3::parse_numerics(k3::numerics_name(n), "x"), n);
  try {
    (void)k3::parse_numerics("fp8", "--numerics");
    FAIL() << "no error";
  } catch (const k3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--numerics"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("mxfp8"), std::string::npos);
  }
}

}  // namespace
