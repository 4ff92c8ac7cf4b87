// Generation loop on the tiny random checkpoint: greedy decode equals argmax of a full
// recompute, and the -n / stop id / -c / cancel / chunked-prefill / prefix-reuse behaviours.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"
#include "runtime/generator.h"
#include "runtime/sampler.h"
#include "runtime_test_util.h"

namespace {

const std::vector<int32_t> kPrompt{72, 101, 108, 108, 111, 44, 32, 119};  // "Hello, w"

k3::Sampler greedy_sampler() {
  k3::SamplerParams p;
  p.temp = 0.0f;
  return k3::Sampler(p);
}

// Last-row logits of a fresh full forward over `ids` (all_logits, one call).
std::vector<float> full_last_logits(const k3::Model& m, const std::vector<int32_t>& ids) {
  k3::SequenceState s = m.new_sequence();
  std::vector<float> all = m.forward(s, ids, true);
  const std::size_t V = static_cast<std::size_t>(m.config().vocab_size);
  return std::vector<float>(all.end() - static_cast<std::ptrdiff_t>(V), all.end());
}

// ||a - b|| / ||b|| (L2)
double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  return d;
}

}  // namespace

TEST(Generator, GreedyEqualsArgmaxOfFullRecompute) {
  const auto& lm = k3test::tiny();
  k3::Sampler s = greedy_sampler();
  k3::GenerateOptions o;
  o.n_predict = 8;
  k3::SequenceState seq = lm.model->new_sequence();
  std::vector<int32_t> streamed;
  const auto r = k3::generate(*lm.model, seq, kPrompt, s, o, [&](int32_t id) {
    streamed.push_back(id);
    return true;
  });
  EXPECT_EQ(r.stop, k3::StopReason::MaxTokens);
  ASSERT_EQ(r.ids.size(), 8u);
  EXPECT_EQ(streamed, r.ids);
  EXPECT_EQ(r.n_prompt, 8);
  EXPECT_EQ(seq.n_past(), 8 + 7);  // the last sampled id is not fed
  std::vector<int32_t> ctx = kPrompt;
  for (int32_t id : r.ids) {
    EXPECT_EQ(id, k3::argmax(full_last_logits(*lm.model, ctx)));
    ctx.push_back(id);
  }
}

TEST(Generator, StopsAtStopIdWithoutStreamingIt) {
  const auto& lm = k3test::tiny();
  k3::Sampler s0 = greedy_sampler();
  k3::GenerateOptions o;
  o.n_predict = 6;
  k3::SequenceState a = lm.model->new_sequence();
  const auto ref = k3::generate(*lm.model, a, kPrompt, s0, o, [](int32_t) { return true; });
  ASSERT_EQ(ref.ids.size(), 6u);
  // make the 4th greedy id a stop id (first occurrence)
  const int32_t stop = ref.ids[3];
  std::size_t first = 0;
  while (ref.ids[first] != stop) ++first;
  o.stop_ids = {stop};
  k3::Sampler s1 = greedy_sampler();
  k3::SequenceState b = lm.model->new_sequence();
  int n_streamed = 0;
  const auto r = k3::generate(*lm.model, b, kPrompt, s1, o, [&](int32_t id) {
    EXPECT_NE(id, stop);
    ++n_streamed;
    return true;
  });
  EXPECT_EQ(r.stop, k3::StopReason::StopToken);
  EXPECT_EQ(r.stop_id, stop);
  EXPECT_EQ(r.ids.size(), first + 1);
  EXPECT_EQ(r.ids.back(), stop);
  EXPECT_EQ(n_streamed, static_cast<int>(first));
}

TEST(Generator, ContextLimit) {
  const auto& lm = k3test::tiny();
  k3::GenerateOptions o;
  o.n_predict = -1;
  o.n_ctx = 12;  // prompt 8: room for 4 ids (positions 8..11)
  k3::Sampler s = greedy_sampler();
  k3::SequenceState seq = lm.model->new_sequence();
  const auto r = k3::generate(*lm.model, seq, kPrompt, s, o, [](int32_t) { return true; });
  EXPECT_EQ(r.stop, k3::StopReason::ContextFull);
  EXPECT_EQ(r.ids.size(), 4u);
  EXPECT_EQ(seq.n_past(), 11);

  // prompt >= -c: error naming -c, sequence untouched
  for (int64_t c : {8, 5}) {
    o.n_ctx = c;
    k3::SequenceState fresh = lm.model->new_sequence();
    try {
      k3::generate(*lm.model, fresh, kPrompt, s, o, [](int32_t) { return true; });
      FAIL() << "no error for -c " << c;
    } catch (const k3::Error& e) {
      EXPECT_NE(std::string(e.what()).find("-c/--ctx-size is " + std::to_string(c)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("prompt is 8 tokens"), std::string::npos) << e.what();
    }
    EXPECT_EQ(fresh.n_past(), 0);
  }
  o.n_ctx = 100;
  k3::SequenceState fresh = lm.model->new_sequence();
  EXPECT_THROW(k3::generate(*lm.model, fresh, std::vector<int32_t>{}, s, o, [](int32_t) { return true; }), k3::Error);
}

TEST(Generator, CancelFromCallbackOrFlag) {
  const auto& lm = k3test::tiny();
  k3::GenerateOptions o;
  o.n_predict = 50;
  k3::Sampler s = greedy_sampler();
  k3::SequenceState seq = lm.model->new_sequence();
  int n = 0;
  auto r = k3::generate(*lm.model, seq, kPrompt, s, o, [&](int32_t) { return ++n < 3; });
  EXPECT_EQ(r.stop, k3::StopReason::Cancelled);
  EXPECT_EQ(r.ids.size(), 3u);

  std::atomic<bool> flag{false};
  o.cancel = &flag;
  k3::SequenceState seq2 = lm.model->new_sequence();
  r = k3::generate(*lm.model, seq2, kPrompt, s, o, [&](int32_t) {
    flag.store(true);  // as the SIGINT handler does
    return true;
  });
  EXPECT_EQ(r.stop, k3::StopReason::Cancelled);
  EXPECT_EQ(r.ids.size(), 1u);
}

TEST(Generator, ChunkedPrefillMatchesOneCall) {
  const auto& lm = k3test::tiny();
  std::vector<int32_t> ids;
  for (int i = 0; i < 37; ++i) ids.push_back((i * 37 + 11) % 256);
  const std::vector<float> one = full_last_logits(*lm.model, ids);
  for (int64_t b : {1, 5, 16}) {
    k3::SequenceState s = lm.model->new_sequence();
    const std::vector<float> chunked = k3::prefill(*lm.model, s, ids, b);
    EXPECT_EQ(s.n_past(), 37);
    // splits that are not multiples of the KDA chunk (64) round differently: fp32-level agreement
    EXPECT_LT(rel_l2(chunked, one), 1e-5) << "batch " << b << ", max abs diff " << max_abs_diff(one, chunked);
  }
  k3::SequenceState s = lm.model->new_sequence();
  EXPECT_THROW(k3::prefill(*lm.model, s, ids, 0), k3::Error);
}

TEST(Generator, StopIdsIncludeEndOfMsgEosAndConfigEos) {
  const auto& lm = k3test::tiny();
  const auto ids = lm.stop_ids();
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], lm.tokenizer->end_of_msg_id());
  EXPECT_EQ(ids[1], lm.tokenizer->eos_id());
  EXPECT_NE(std::find(ids.begin(), ids.end(), 502), ids.end());  // tiny config eos_token_id
}

TEST(Generator, OpenRejectsMissingDirAndMissingTokenizer) {
  try {
    k3::LoadedModel::open("/nonexistent/k3-dir");
    FAIL();
  } catch (const k3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/k3-dir"), std::string::npos);
  }
}

TEST(Generator, PrefillProgressIsReportedAfterEachChunk) {
  const auto& lm = k3test::tiny();
  for (const bool cached : {false, true}) {
    k3::Sampler s = greedy_sampler();
    k3::GenerateOptions o;
    o.n_predict = 1;
    o.n_batch = 3;
    k3::PrefixCacheOptions po;
    po.block_tokens = 64;
    k3::PrefixCache cache(*lm.model, "progress-test", po);
    if (cached) o.cache = &cache;
    std::vector<std::pair<int64_t, int64_t>> calls;
    o.on_prefill_progress = [&](std::string_view what, int64_t done, int64_t total) {
      EXPECT_EQ(what, "prefill");
      calls.emplace_back(done, total);
    };
    k3::SequenceState seq = lm.model->new_sequence();
    k3::generate(*lm.model, seq, kPrompt, s, o, [](int32_t) { return true; });
    // 8 prompt ids in chunks of 3, announced first
    const std::vector<std::pair<int64_t, int64_t>> want{{0, 8}, {3, 8}, {6, 8}, {8, 8}};
    EXPECT_EQ(calls, want) << (cached ? "through the prefix cache" : "plain prefill");
  }
}

TEST(Generator, LoadProgressReportsShardsAndTrunkQuantization) {
  std::vector<std::tuple<std::string, int64_t, int64_t>> calls;
  k3::ModelOptions mo;
  mo.trunk_quant = k3::QuantKind::Q8;
  mo.progress = [&](std::string_view what, int64_t done, int64_t total) { calls.emplace_back(what, done, total); };
  const k3::LoadedModel lm = k3::LoadedModel::open(k3test::tiny_model_dir(), mo);
  const int64_t n_shards = lm.checkpoint->shard_count();
  // each step: 0 first, then 1, 2, ... total, one call at a time
  int64_t shards_seen = -1, quant_seen = -1, quant_total = -1;
  for (const auto& [what, done, total] : calls) {
    if (what == "shard headers") {
      EXPECT_EQ(done, ++shards_seen);
      EXPECT_EQ(total, n_shards);
    } else if (what == "trunk quantization") {
      EXPECT_EQ(done, ++quant_seen);
      quant_total = total;
    } else {
      ADD_FAILURE() << "unexpected step " << what;
    }
  }
  EXPECT_EQ(shards_seen, n_shards);
  EXPECT_GT(quant_seen, 0);
  EXPECT_EQ(quant_seen, quant_total);
}
