// k3_core: dtype table, bf16 conversion, MXFP4 helpers, checked arithmetic, MappedFile.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/bf16.h"
#include "core/checked_math.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "core/mxfp4.h"

using namespace k3;

TEST(DType, NamesSizesRoundTrip) {
  const DType all[] = {DType::BF16, DType::F16, DType::F32, DType::F64,  DType::I8,      DType::U8,
                       DType::I16,  DType::I32, DType::I64, DType::BOOL, DType::F8_E4M3, DType::F8_E5M2};
  const size_t sizes[] = {2, 2, 4, 8, 1, 1, 2, 4, 8, 1, 1, 1};
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(dtype_size(all[i]), sizes[i]);
    EXPECT_EQ(dtype_from_name(dtype_name(all[i])), all[i]);
  }
  EXPECT_EQ(dtype_name(DType::F8_E4M3), "F8_E4M3");
  EXPECT_FALSE(dtype_from_name("bf16").has_value());
  EXPECT_FALSE(dtype_from_name("").has_value());
}

TEST(BF16, ExactAndRounding) {
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even -> 1.0.
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3F80);
  // 1 + 3*2^-8 rounds up to 1 + 2^-6 (0x3F82).
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3F82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::infinity())), std::numeric_limits<float>::infinity());
}

TEST(MXFP4, E2M1AndE8M0) {
  EXPECT_EQ(kE2M1[0b0111], 6.0f);
  EXPECT_EQ(kE2M1[0b1001], -0.5f);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(static_cast<float>(kE2M1x2[i]), 2.0f * kE2M1[i]);
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(130), 8.0f);
  EXPECT_EQ(e8m0_to_f32(1), std::ldexp(1.0f, -126));
  EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.0f, -127));
  EXPECT_TRUE(mxfp4_scale_valid(0xFE));
  EXPECT_FALSE(mxfp4_scale_valid(0xFF));
}

TEST(CheckedMath, Overflow) {
  EXPECT_EQ(checked_mul(1ull << 31, 1ull << 31), 1ull << 62);
  EXPECT_FALSE(checked_mul(1ull << 32, 1ull << 32).has_value());
  EXPECT_EQ(checked_add(1, 2), 3u);
  EXPECT_FALSE(checked_add(~0ull, 1).has_value());
}

TEST(MappedFile, MapsBytesAndReportsErrors) {
  const auto p = std::filesystem::temp_directory_path() / ("k3_core_mf_" + std::to_string(::getpid()));
  {
    std::ofstream f(p, std::ios::binary);
    f << "hello";
  }
  {
    MappedFile m(p);
    ASSERT_EQ(m.size(), 5u);
    EXPECT_EQ(std::memcmp(m.data(), "hello", 5), 0);
  }
  std::filesystem::resize_file(p, 0);
  {
    MappedFile m(p);
    EXPECT_EQ(m.size(), 0u);
    EXPECT_TRUE(m.bytes().empty());
  }
  std::filesystem::remove(p);
  try {
    MappedFile m(p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(p.string() + ": cannot open"), std::string::npos);
  }
  EXPECT_THROW(MappedFile("/tmp"), Error);
}
