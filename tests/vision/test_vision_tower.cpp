// VisionTower on a tiny random tower (tests/io/vision_fixture.h): a batch gives each image the
// rows it gets alone (attention stays inside an image), the attention tiling does not change the
// result beyond fp32 reassociation, the merge order and token counts, the workspace is linear
// in the patch count, and bad inputs / a text-only checkpoint are refused naming the cause.
// Numerical agreement with the fp64 reference is tests/python/test_vision_tower.py's.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "io/checkpoint.h"
#include "vision/vision_tower.h"
#include "vision_fixture.h"

using namespace k3;
using namespace k3::vision;

namespace {

ImagePatches random_image(int64_t h, int64_t w, uint32_t seed) {
  ImagePatches im;
  im.grid_h = h;
  im.grid_w = w;
  im.name = "img" + std::to_string(seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  im.patches.resize(static_cast<size_t>(h * w * kPatchValues));
  for (float& v : im.patches) v = u(rng);
  return im;
}

double max_rel_row_diff(const float* a, const float* b, int64_t rows, int64_t cols) {
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double num = 0, den = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double d = static_cast<double>(a[r * cols + c]) - b[r * cols + c];
      num += d * d;
      den += static_cast<double>(b[r * cols + c]) * b[r * cols + c];
    }
    worst = std::max(worst, std::sqrt(num / den));
  }
  return worst;
}

class VisionTowerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    k3test::tiny_vision_checkpoint().write(dir_.path());
    ck_ = Checkpoint::open(dir_.path());
    tower_ = std::make_unique<VisionTower>(*ck_);
  }
  k3test::TempDir dir_;
  std::unique_ptr<Checkpoint> ck_;
  std::unique_ptr<VisionTower> tower_;
};

}  // namespace

TEST_F(VisionTowerTest, BatchRowsEqualSingleImageRows) {
  const int64_t Dt = tower_->config().text_hidden_size;
  std::vector<ImagePatches> imgs = {random_image(4, 6, 1), random_image(2, 2, 2), random_image(8, 4, 3)};
  const VisionOutput all = tower_->encode(imgs);
  ASSERT_EQ(all.n_tokens, (std::vector<int64_t>{6, 1, 8}));
  ASSERT_EQ(all.embeddings.size(), static_cast<size_t>(15 * Dt));
  int64_t t0 = 0;
  for (const ImagePatches& im : imgs) {
    const VisionOutput one = tower_->encode(std::span<const ImagePatches>(&im, 1));
    const int64_t n = one.n_tokens[0];
    // the GEMM kernels compute a row as they would alone; the rest is per row or per image
    EXPECT_LT(max_rel_row_diff(all.embeddings.data() + t0 * Dt, one.embeddings.data(), n, Dt), 1e-6) << im.name;
    t0 += n;
  }
}

TEST_F(VisionTowerTest, AttentionTilingOnlyReassociates) {
  const int64_t Dt = tower_->config().text_hidden_size;
  const std::vector<ImagePatches> imgs = {random_image(10, 6, 4)};
  const VisionOutput a = tower_->encode(imgs);  // one key tile (60 <= 256)
  VisionOptions o;
  o.query_tile = 7;
  o.key_tile = 5;  // 12 online-softmax steps with a ragged last tile
  o.mlp_rows = 13;
  const VisionOutput b = tower_->encode(imgs, o);
  EXPECT_LT(max_rel_row_diff(b.embeddings.data(), a.embeddings.data(), 15, Dt), 1e-5);
  for (float v : b.embeddings) ASSERT_TRUE(std::isfinite(v));
  // every output row has the RMS of the post-norm weight scale: rms(row / g) = 1 (vision.md §5.2)
  const std::vector<float>& g = tower_->weights().post_norm;
  for (int64_t r = 0; r < 15; ++r) {
    double s = 0;
    for (int64_t c = 0; c < Dt; ++c) {
      const double x = a.embeddings[r * Dt + c] / g[c];
      s += x * x;
    }
    EXPECT_NEAR(std::sqrt(s / Dt), 1.0, 1e-4);
  }
}

TEST_F(VisionTowerTest, WorkspaceIsLinearInPatches) {
  const uint64_t w1 = tower_->workspace_bytes(1024, 1024), w2 = tower_->workspace_bytes(2048, 2048);
  const uint64_t w4 = tower_->workspace_bytes(4096, 4096);
  EXPECT_EQ(w4 - w2, 2 * (w2 - w1));  // affine in L: no L² term
  const std::vector<ImagePatches> imgs = {random_image(4, 6, 6)};
  EXPECT_EQ(tower_->encode(imgs).workspace_bytes, tower_->workspace_bytes(24, 24));
}

TEST_F(VisionTowerTest, BadImagesAreRefusedByName) {
  auto err = [&](ImagePatches im) {
    try {
      tower_->encode(std::span<const ImagePatches>(&im, 1));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  ImagePatches odd = random_image(4, 6, 7);
  odd.grid_w = 5;
  EXPECT_NE(err(odd).find("image 0 ('img7'): grid width 5 must be even"), std::string::npos) << err(odd);
  ImagePatches big = random_image(2, 2, 8);
  big.grid_h = 514;
  EXPECT_NE(err(big).find("grid height 514 must be even and within [2, 512]"), std::string::npos);
  ImagePatches short_ = random_image(2, 2, 9);
  short_.patches.pop_back();
  EXPECT_NE(err(short_).find("2351 patch values, expected 2352"), std::string::npos) << err(short_);
  ImagePatches nan = random_image(2, 2, 10);
  nan.patches[5] = std::nanf("");
  EXPECT_NE(err(nan).find("patch value 5 is not finite"), std::string::npos);
  EXPECT_THROW(tower_->encode({}), Error);
}

TEST(VisionTowerRefusal, TextOnlyCheckpoint) {
  k3test::TempDir d;
  k3test::FxCheckpoint fx = k3test::tiny_checkpoint();
  fx.config.erase("vision_config");
  fx.write(d.path());
  auto ck = Checkpoint::open(d.path());
  try {
    VisionTower t(*ck);
    ADD_FAILURE() << "a text-only checkpoint was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), d.path().string() + " has no vision tower (no vision_config in config.json)");
  }
}
