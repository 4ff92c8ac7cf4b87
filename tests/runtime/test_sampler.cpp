// Sampler: the llama.cpp chain (penalties -> top-k -> top-p -> min-p -> temperature -> draw),
// greedy tie rule, determinism per seed, and sampled frequencies against exact probabilities.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/error.h"
#include "runtime/sampler.h"

namespace {

k3::SamplerParams params(float temp, int top_k, float top_p, float min_p, uint64_t seed = 1) {
  k3::SamplerParams p;
  p.temp = temp;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = seed;
  return p;
}

// Frequencies of `n` draws.
std::map<int32_t, double> freqs(k3::Sampler& s, const std::vector<float>& logits, int n) {
  std::map<int32_t, double> f;
  for (int i = 0; i < n; ++i) f[s.sample(logits)] += 1.0 / n;
  return f;
}

}  // namespace

TEST(Sampler, GreedyPicksMaxAndLowestIdOnTies) {
  k3::Sampler s(params(0.0f, 40, 0.95f, 0.05f));
  EXPECT_EQ(s.sample(std::vector<float>{0.1f, 3.0f, -2.0f, 2.9f}), 1);
  EXPECT_EQ(s.sample(std::vector<float>{1.0f, 5.0f, 5.0f, 5.0f}), 1);
  EXPECT_EQ(s.sample(std::vector<float>{-INFINITY, -1.0f, -1.0f}), 1);
  EXPECT_EQ(k3::argmax(std::vector<float>{2.0f, 7.0f, 7.0f}), 1);
  EXPECT_EQ(k3::argmax(std::vector<float>{NAN, -1.0f, NAN}), 1);
  EXPECT_THROW(k3::argmax(std::vector<float>{}), k3::Error);
}

TEST(Sampler, RepeatPenaltyDividesPositiveMultipliesNegative) {
  auto p = params(0.0f, 0, 1.0f, 0.0f);
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 2;
  k3::Sampler s(p);
  // id 0: 3.0 -> 1.5 (penalized) < id 1: 2.0  => greedy picks 1
  s.accept(0);
  EXPECT_EQ(s.sample(std::vector<float>{3.0f, 2.0f, -1.0f}), 1);
  // negative: id 0 at -1.0 -> -2.0 < id 1 at -1.5 => picks 1
  EXPECT_EQ(s.sample(std::vector<float>{-1.0f, -1.5f, -3.0f}), 1);
  // window of 2: after accepting 5 and 6, id 0 is no longer penalized
  s.accept(5);
  s.accept(6);
  EXPECT_EQ(s.sample(std::vector<float>{3.0f, 2.0f, -1.0f}), 0);
  // a repeated id is penalized once, not once per occurrence: 4.1/2 = 2.05 > 2.0
  s.accept(0);
  s.accept(0);
  EXPECT_EQ(s.sample(std::vector<float>{4.1f, 2.0f, -1.0f}), 0);
}

TEST(Sampler, FrequencyAndPresencePenaltiesSubtractPerCountAndOnce) {
  // OpenAI's additive penalties: logit -= count·frequency + (count > 0)·presence, over the window.
  auto p = params(0.0f, 0, 1.0f, 0.0f);
  p.frequency_penalty = 0.5f;
  p.repeat_last_n = -1;
  k3::Sampler s(p);
  s.accept(0);
  s.accept(0);
  s.accept(1);
  // id 0: 3.0 - 2·0.5 = 2.0; id 1: 2.6 - 0.5 = 2.1; id 2: 1.9 => picks 1
  EXPECT_EQ(s.sample(std::vector<float>{3.0f, 2.6f, 1.9f}), 1);
  // id 0: 3.0 - 1.0 = 2.0 > id 1: 2.4 - 0.5 = 1.9 => picks 0
  EXPECT_EQ(s.sample(std::vector<float>{3.0f, 2.4f, 1.9f}), 0);
  p.frequency_penalty = 0.0f;
  p.presence_penalty = 1.5f;
  k3::Sampler q(p);
  q.accept(0);
  q.accept(0);
  // presence counts once: 3.0 - 1.5 = 1.5 < 1.6
  EXPECT_EQ(q.sample(std::vector<float>{3.0f, 1.6f}), 1);
  EXPECT_EQ(q.sample(std::vector<float>{3.0f, 1.4f}), 0);
  // negative penalties raise the logit; out-of-range values name the flag
  p.presence_penalty = -2.5f;
  EXPECT_THROW(k3::Sampler{p}, k3::Error);
  p.presence_penalty = 0.0f;
  p.frequency_penalty = NAN;
  EXPECT_THROW(k3::Sampler{p}, k3::Error);
}

TEST(Sampler, SameSeedSameStreamDifferentSeedDifferentStream) {
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[i] = std::sin(i * 0.7f);
  auto run = [&](uint64_t seed) {
    k3::Sampler s(params(1.0f, 0, 1.0f, 0.0f, seed));
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(logits));
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Sampler, PlainTemperatureMatchesSoftmax) {
  // temp 0.5 on logits {0, ln2, ln4}: weights 1, 4, 16 -> 1/21, 4/21, 16/21
  const std::vector<float> logits{0.0f, std::log(2.0f), std::log(4.0f)};
  k3::Sampler s(params(0.5f, 0, 1.0f, 0.0f, 7));
  auto f = freqs(s, logits, 40000);
  EXPECT_NEAR(f[0], 1.0 / 21, 0.006);
  EXPECT_NEAR(f[1], 4.0 / 21, 0.01);
  EXPECT_NEAR(f[2], 16.0 / 21, 0.01);
}

TEST(Sampler, TopKKeepsOnlyKLargest) {
  const std::vector<float> logits{1.0f, 0.0f, 1.0f, 0.5f, 0.9f};
  k3::Sampler s(params(1.0f, 2, 1.0f, 0.0f, 3));
  auto f = freqs(s, logits, 4000);
  EXPECT_EQ(f.size(), 2u);  // ids 0 and 2 (tie at 1.0), equally likely
  EXPECT_NEAR(f[0], 0.5, 0.04);
  EXPECT_NEAR(f[2], 0.5, 0.04);
  k3::Sampler g(params(1.0f, 1, 1.0f, 0.0f, 3));
  for (int i = 0; i < 20; ++i) EXPECT_EQ(g.sample(logits), 0);  // top-1 tie -> lowest id
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingP) {
  // probabilities 0.5, 0.25, 0.125, 0.125
  const std::vector<float> logits{std::log(4.0f), std::log(2.0f), 0.0f, 0.0f};
  k3::Sampler s(params(1.0f, 0, 0.7f, 0.0f, 5));  // 0.5 < 0.7 <= 0.75: keep ids 0, 1
  auto f = freqs(s, logits, 30000);
  EXPECT_EQ(f.size(), 2u);
  EXPECT_NEAR(f[0], 2.0 / 3, 0.012);
  EXPECT_NEAR(f[1], 1.0 / 3, 0.012);
  k3::Sampler t(params(1.0f, 0, 0.5f, 0.0f, 5));  // exactly reaching p keeps just id 0
  for (int i = 0; i < 20; ++i) EXPECT_EQ(t.sample(logits), 0);
}

TEST(Sampler, MinPDropsTokensBelowFractionOfMax) {
  // probabilities proportional to 8, 4, 1: min_p 0.2 keeps 8 and 4 (1/8 = 0.125 < 0.2)
  const std::vector<float> logits{std::log(8.0f), std::log(4.0f), 0.0f};
  k3::Sampler s(params(1.0f, 0, 1.0f, 0.2f, 9));
  auto f = freqs(s, logits, 30000);
  EXPECT_EQ(f.size(), 2u);
  EXPECT_NEAR(f[0], 2.0 / 3, 0.012);
}

TEST(Sampler, TemperatureAppliesAfterFilters) {
  // top-p at temp 1 sees 0.5/0.25/0.125/0.125 and keeps ids 0,1 (p=0.7); a temperature of 100
  // then flattens only those two. If temperature came first, every id would survive top-p.
  const std::vector<float> logits{std::log(4.0f), std::log(2.0f), 0.0f, 0.0f};
  k3::Sampler s(params(100.0f, 0, 0.7f, 0.0f, 11));
  auto f = freqs(s, logits, 20000);
  EXPECT_EQ(f.size(), 2u);
  EXPECT_NEAR(f[0], 0.5, 0.02);
}

TEST(Sampler, MaskedLogitsAreNeverSampled) {
  const std::vector<float> logits{-INFINITY, 0.0f, -INFINITY, 0.0f};
  k3::Sampler s(params(1.0f, 0, 1.0f, 0.0f, 2));
  for (int i = 0; i < 200; ++i) {
    const int32_t id = s.sample(logits);
    EXPECT_TRUE(id == 1 || id == 3);
  }
  EXPECT_THROW(s.sample(std::vector<float>{-INFINITY, -INFINITY}), k3::Error);
  EXPECT_THROW(s.sample(std::vector<float>{0.0f, NAN}), k3::Error);
  EXPECT_THROW(s.sample(std::vector<float>{}), k3::Error);
}

TEST(Sampler, BadParamsNameTheFlag) {
  auto expect_msg = [](k3::SamplerParams p, const std::string& flag) {
    try {
      k3::Sampler s(p);
      FAIL() << "no error for " << flag;
    } catch (const k3::Error& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  auto p = params(0.8f, 40, 0.95f, 0.05f);
  auto q = p;
  q.top_p = 0.0f;
  expect_msg(q, "--top-p");
  q = p;
  q.top_p = 1.5f;
  expect_msg(q, "--top-p");
  q = p;
  q.min_p = -0.1f;
  expect_msg(q, "--min-p");
  q = p;
  q.temp = NAN;
  expect_msg(q, "--temp");
  q = p;
  q.repeat_penalty = 0.0f;
  expect_msg(q, "--repeat-penalty");
  q = p;
  q.repeat_last_n = -2;
  expect_msg(q, "--repeat-last-n");
}
