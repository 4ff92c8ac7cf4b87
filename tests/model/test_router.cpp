// Router top-k rules (model/router.h, spec §3.6 steps 2–3).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "model/router.h"

namespace {

TEST(Router, NegativeBiasedScoresStillFollowBiasedOrder) {
  // All scores ≈ 0.01, every bias −2: biased scores are all ≈ −1.99 (negative). Selection must
  // follow the biased order — no sentinel that assumes non-negative scores.
  const int E = 8, k = 3;
  std::vector<float> s(E), b(E, -2.f);
  for (int e = 0; e < E; ++e) s[e] = 0.01f + 0.0001f * static_cast<float>((e * 5) % E);
  b[6] = -1.99f;  // expert 6 gets the largest biased score even though its raw score is not largest
  std::vector<int32_t> ids(k);
  std::vector<float> w(k);
  k3::router_select_topk(s, b, k, true, 1.f, ids, w);
  // Biased: e6 = s6 − 1.99 is largest; then the largest s among the rest (s = 0.01 + 1e-4·(5e mod 8)):
  // e=3 → 7, e=6 → 6 (taken), e=1 → 5, e=4 → 4.
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 6}));
  EXPECT_NEAR(w[0] + w[1] + w[2], 1.0, 1e-6);
  // Weights come from the UNBIASED scores.
  const double sum = s[1] + s[3] + s[6];
  EXPECT_NEAR(w[0], s[1] / sum, 1e-7);
  EXPECT_NEAR(w[2], s[6] / sum, 1e-7);
}

TEST(Router, NanNeverSelectedTiesLowerIdWins) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> s = {0.5f, nan, 0.5f, 0.9f, 0.5f, nan};
  std::vector<float> b(6, 0.f);
  std::vector<int32_t> ids(3);
  std::vector<float> w(3);
  k3::router_select_topk(s, b, 3, true, 1.f, ids, w);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 2, 3}));  // 3 first, then the tie 0/2/4 → 0 and 2
  std::vector<float> s2 = {0.2f, 0.3f, 0.4f, 0.1f};
  std::vector<float> b2 = {0.f, nan, 0.f, 0.f};  // NaN bias also excludes
  std::vector<int32_t> ids2(2);
  std::vector<float> w2(2);
  k3::router_select_topk(s2, b2, 2, true, 1.f, ids2, w2);
  EXPECT_EQ(ids2, (std::vector<int32_t>{0, 2}));
  std::vector<float> all_nan(4, nan);
  EXPECT_THROW(k3::router_select_topk(all_nan, b2, 2, true, 1.f, ids2, w2), k3::Error);
}

TEST(Router, WeightsSumToScalingFactor) {
  std::vector<float> s = {0.1f, 0.7f, 0.3f, 0.9f, 0.2f};
  std::vector<float> b = {0.f, 0.1f, -0.1f, 0.f, 0.5f};
  std::vector<int32_t> ids(3);
  std::vector<float> w(3);
  k3::router_select_topk(s, b, 3, true, 2.5f, ids, w);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 4}));
  EXPECT_NEAR(std::accumulate(w.begin(), w.end(), 0.0), 2.5, 1e-6);
  // Without renormalization: raw scores times the factor.
  k3::router_select_topk(s, b, 3, false, 2.f, ids, w);
  EXPECT_FLOAT_EQ(w[0], 1.4f);
  EXPECT_FLOAT_EQ(w[1], 1.8f);
  EXPECT_FLOAT_EQ(w[2], 0.4f);
}

TEST(Router, RejectsBadK) {
  std::vector<float> s(4, 0.5f), b(4, 0.f);
  std::vector<int32_t> ids(5);
  std::vector<float> w(5);
  EXPECT_THROW(k3::router_select_topk(s, b, 5, true, 1.f, ids, w), k3::Error);
  std::vector<float> b3(3, 0.f);
  std::vector<int32_t> ids2(2);
  std::vector<float> w2(2);
  EXPECT_THROW(k3::router_select_topk(s, b3, 2, true, 1.f, ids2, w2), k3::Error);
}

}  // namespace
