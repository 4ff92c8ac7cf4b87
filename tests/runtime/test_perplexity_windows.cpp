// The sliding-window schedule of perplexity.h (shared with the trainer) and the NLL formula.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "runtime/perplexity.h"

namespace {
// Targets scored by each window, following the written definition literally.
std::vector<std::vector<int64_t>> targets_by_window(int64_t n, int64_t n_ctx, int64_t stride) {
  std::vector<std::vector<int64_t>> out;
  int64_t done = 1;
  for (int64_t s : k3::perplexity_windows(n, n_ctx, stride)) {
    const int64_t e = std::min(s + n_ctx, n);
    std::vector<int64_t> t;
    for (int64_t i = done; i < e; ++i) t.push_back(i);
    done = e;
    out.push_back(t);
  }
  return out;
}
}  // namespace

TEST(PerplexityWindows, SingleWindowWhenTextFits) {
  EXPECT_EQ(k3::perplexity_windows(10, 16, 8), (std::vector<int64_t>{0}));
  EXPECT_EQ(k3::perplexity_windows(16, 16, 8), (std::vector<int64_t>{0}));
  EXPECT_EQ(k3::perplexity_windows(2, 16, 8), (std::vector<int64_t>{0}));
}

TEST(PerplexityWindows, HalfStrideScoresLastStridePositions) {
  // n=40, ctx 16, stride 8: windows [0,16) [8,24) [16,32) [24,40)
  EXPECT_EQ(k3::perplexity_windows(40, 16, 8), (std::vector<int64_t>{0, 8, 16, 24}));
  const auto t = targets_by_window(40, 16, 8);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0].front(), 1);
  EXPECT_EQ(t[0].back(), 15);
  EXPECT_EQ(t[1], (std::vector<int64_t>{16, 17, 18, 19, 20, 21, 22, 23}));
  EXPECT_EQ(t[3].back(), 39);
}

TEST(PerplexityWindows, FinalWindowTruncatedScoresOnlyNewTargets) {
  // n=21, ctx 16, stride 8: [0,16) then [8,21) scoring 16..20 only
  EXPECT_EQ(k3::perplexity_windows(21, 16, 8), (std::vector<int64_t>{0, 8}));
  const auto t = targets_by_window(21, 16, 8);
  EXPECT_EQ(t[1], (std::vector<int64_t>{16, 17, 18, 19, 20}));
  // n=17, stride 3: [0,16) then [3,17) scoring just 16
  EXPECT_EQ(targets_by_window(17, 16, 3)[1], (std::vector<int64_t>{16}));
}

TEST(PerplexityWindows, EveryTokenButTheFirstScoredOnce) {
  for (int64_t n : {2, 3, 17, 64, 100, 257})
    for (int64_t ctx : {2, 5, 16, 32})
      for (int64_t stride : {int64_t{1}, ctx / 2, ctx - 1}) {
        if (stride < 1) continue;
        std::vector<int> count(static_cast<std::size_t>(n), 0);
        for (const auto& w : targets_by_window(n, ctx, stride))
          for (int64_t i : w) ++count[static_cast<std::size_t>(i)];
        EXPECT_EQ(count[0], 0);
        for (int64_t i = 1; i < n; ++i)
          EXPECT_EQ(count[static_cast<std::size_t>(i)], 1) << n << " " << ctx << " " << stride;
      }
}

TEST(PerplexityWindows, BadOptionsNameTheFlag) {
  EXPECT_THROW(k3::perplexity_windows(10, 1, 1), k3::Error);
  EXPECT_THROW(k3::perplexity_windows(10, 16, 16), k3::Error);
  EXPECT_THROW(k3::perplexity_windows(10, 16, 0), k3::Error);
  EXPECT_THROW(k3::perplexity_windows(1, 16, 8), k3::Error);
  try {
    k3::perplexity_windows(10, 16, 20);
  } catch (const k3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--stride"), std::string::npos);
  }
}

TEST(PerplexityWindows, TokenNllIsNegativeLogSoftmaxInDouble) {
  const std::vector<float> row{1.0f, 2.0f, 3.0f};
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(k3::token_nll(row, 0), -(1.0 - std::log(z)), 1e-12);
  EXPECT_NEAR(k3::token_nll(row, 2), -(3.0 - std::log(z)), 1e-12);
  // large logits do not overflow
  EXPECT_NEAR(k3::token_nll(std::vector<float>{1000.0f, 1000.0f}, 1), std::log(2.0), 1e-12);
  EXPECT_THROW(k3::token_nll(row, 3), k3::Error);
  EXPECT_THROW(k3::token_nll(row, -1), k3::Error);
}

TEST(PerplexityWindows, UnigramBaselineUsesInSampleCounts) {
  // targets (tokens[1..]) = {5, 5, 6, 7}: p = 1/2, 1/2, 1/4, 1/4
  const std::vector<int32_t> t{9, 5, 5, 6, 7};
  const double want = std::exp(-(2 * std::log(0.5) + 2 * std::log(0.25)) / 4);
  EXPECT_NEAR(k3::unigram_perplexity(t), want, 1e-12);
  EXPECT_NEAR(k3::unigram_perplexity(std::vector<int32_t>{1, 3, 3, 3}), 1.0, 1e-12);
  EXPECT_THROW(k3::unigram_perplexity(std::vector<int32_t>{1}), k3::Error);
}
