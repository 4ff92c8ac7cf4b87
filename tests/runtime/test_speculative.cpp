// Speculative decoding (issue 12): decode-form verify rows and states bit-identical to one-token
// decoding, exact rollback, greedy speculative output identical to plain decoding (prompt lookup
// and draft model, k = 1..8, many prompts), the sequence state after generation identical to
// plain decoding's, and a chi-square test at temperature 1 that speculative sampling gives
// plain sampling's distribution.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "model/sequence_state.h"
#include "runtime/draft_model.h"
#include "runtime/generator.h"
#include "runtime/ngram_drafter.h"
#include "runtime/speculative.h"
#include "runtime_test_util.h"

namespace {

using k3::Model;
using k3::SequenceState;

/// Bitwise equality of two states (n_past, every KDA S / conv window, every MLA latent row).
::testing::AssertionResult same_state(const SequenceState& a, const SequenceState& b) {
  const std::string d = k3::state_difference(a, b);
  if (!d.empty()) return ::testing::AssertionFailure() << d;
  return ::testing::AssertionSuccess();
}

/// A second tiny random checkpoint (other seed, same vocab and byte tokenizer): a poor draft.
const k3::LoadedModel& tiny_other() {
  struct Holder {
    std::filesystem::path dir;
    k3::LoadedModel m;
    Holder() {
      char tmpl[] = "/tmp/k3spec-XXXXXX";
      if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
      dir = tmpl;
      const std::string cmd = std::string(K3_SOURCE_DIR) + "/.venv/bin/python " + K3_SOURCE_DIR +
                              "/tools/reference/gen_tiny.py --out " + dir.string() +
                              " --variant k3 --seed 2 > /dev/null";
      if (std::system(cmd.c_str()) != 0) throw std::runtime_error("gen_tiny.py failed: " + cmd);
      std::ofstream(dir / "tiktoken.model") << k3test::byte_tiktoken_model();
      k3::ModelOptions o;
      o.exec.kernels = k3::ModelKernels::Fast;
      o.exec.mxfp4 = k3::Mxfp4Path::ExactF32;
      m = k3::LoadedModel::open(dir, o);
    }
    ~Holder() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  };
  static Holder h;
  return h.m;
}

/// K3-mini (models/k3-mini, the default fast path), loaded once.
const k3::LoadedModel& mini() {
  static const k3::LoadedModel m = [] {
    k3::set_num_threads(1);
    return k3::LoadedModel::open(std::filesystem::path(K3_SOURCE_DIR) / "models/k3-mini");
  }();
  return m;
}

std::vector<int32_t> encode(const k3::LoadedModel& lm, const std::string& s) { return lm.tokenizer->encode(s); }

k3::SamplerParams greedy_params() {
  k3::SamplerParams p;
  p.temp = 0.0f;
  return p;
}

struct GenRun {
  std::vector<int32_t> ids;
  SequenceState seq;
};

GenRun run_plain(const Model& m, std::span<const int32_t> prompt, int64_t n, const k3::SamplerParams& sp) {
  GenRun r{{}, m.new_sequence()};
  k3::Sampler s(sp);
  k3::GenerateOptions o;
  o.n_predict = n;
  r.ids = k3::generate(m, r.seq, prompt, s, o, [](int32_t) { return true; }).ids;
  return r;
}

GenRun run_spec(const Model& m, std::span<const int32_t> prompt, int64_t n, const k3::SamplerParams& sp,
                k3::Speculator& spec) {
  GenRun r{{}, m.new_sequence()};
  k3::Sampler s(sp);
  k3::GenerateOptions o;
  o.n_predict = n;
  o.speculative = &spec;
  r.ids = k3::generate(m, r.seq, prompt, s, o, [](int32_t) { return true; }).ids;
  return r;
}

// --- the decode form and rollback ------------------------------------------------------------

// One forward of T tokens in the decode form gives the same bits (every logits row, the state)
// as T one-token forwards, on the tiny model and on K3-mini.
TEST(Speculative, DecodeFormIsBitIdenticalToOneTokenSteps) {
  for (const k3::LoadedModel* lm : {&k3test::tiny(), &mini()}) {
    const Model& m = *lm->model;
    const std::vector<int32_t> prompt = encode(*lm, "And God said, Let there be light");
    const std::vector<int32_t> win = encode(*lm, " and there was light. And God saw");
    SequenceState a = m.new_sequence();
    m.forward(a, prompt, false);
    SequenceState b = a;
    k3::StateLog steps;
    k3::BatchEntry e{&a, win, k3::BatchLogits::All};
    e.per_token = true;
    e.kda_steps = &steps;
    const std::vector<float> all = m.forward_batch(std::span<const k3::BatchEntry>(&e, 1))[0];
    const int64_t V = m.config().vocab_size;
    for (size_t t = 0; t < win.size(); ++t) {
      const std::vector<float> one = m.forward(b, std::span<const int32_t>(&win[t], 1), false);
      ASSERT_EQ(std::memcmp(one.data(), all.data() + t * V, V * sizeof(float)), 0) << "row " << t;
    }
    EXPECT_TRUE(same_state(a, b));
    EXPECT_EQ(static_cast<int64_t>(steps.floats().size()), static_cast<int64_t>(win.size()) * a.snapshot_floats());
  }
}

// Rolling back to any prefix of the verified window equals feeding only that prefix.
TEST(Speculative, RollbackToEveryPositionIsExact) {
  const Model& m = *mini().model;
  const std::vector<int32_t> prompt = encode(mini(), "In the beginning God created");
  const std::vector<int32_t> win = encode(mini(), " the heaven and the earth. And the earth was");
  ASSERT_GE(win.size(), 9u);
  SequenceState base = m.new_sequence();
  m.forward(base, prompt, false);
  for (int64_t keep = 1; keep <= static_cast<int64_t>(win.size()); ++keep) {
    SequenceState a = base;
    k3::StateLog steps;
    k3::BatchEntry e{&a, win, k3::BatchLogits::All};
    e.per_token = true;
    e.kda_steps = &steps;
    m.forward_batch(std::span<const k3::BatchEntry>(&e, 1));
    a.rollback_to(steps, base.n_past() + keep);
    SequenceState b = base;
    for (int64_t t = 0; t < keep; ++t) m.forward(b, std::span<const int32_t>(&win[t], 1), false);
    EXPECT_TRUE(same_state(a, b)) << "keep " << keep;
    // The rolled-back state continues exactly like the plain one.
    const int32_t next = win[0];
    const auto la = m.forward(a, std::span<const int32_t>(&next, 1), false);
    const auto lb = m.forward(b, std::span<const int32_t>(&next, 1), false);
    EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0) << "keep " << keep;
  }
  SequenceState a = base;
  k3::StateLog steps;
  EXPECT_THROW(a.rollback_to(steps, a.n_past()), k3::Error);  // empty log
  k3::BatchEntry bad{&a, win, k3::BatchLogits::All};
  bad.kda_steps = &steps;  // a log needs the decode form
  EXPECT_THROW(m.forward_batch(std::span<const k3::BatchEntry>(&bad, 1)), k3::Error);
}

// --- greedy exactness ------------------------------------------------------------------------

// Prompt lookup on K3-mini: identical ids and final state for every k in 1..8 over many prompts
// (real text and a repetitive quoting task).
TEST(Speculative, GreedyPromptLookupMatchesPlainDecoding) {
  const Model& m = *mini().model;
  const std::vector<std::string> prompts = {
      "And God said",
      "In the beginning God created the heaven and the earth. In the beginning God",
      "Blessed are the poor in spirit: for theirs is the kingdom of heaven. Blessed are",
      "The LORD is my shepherd; I shall not want. He maketh me to lie down in green pastures: The LORD",
      "Repeat: and the evening and the morning were the first day. Repeat: and the evening",
      "I am Alpha and Omega, the beginning and the ending, saith the Lord, which is, and which was"};
  int64_t accepted = 0, drafted = 0;
  for (const std::string& p : prompts) {
    const std::vector<int32_t> ids = encode(mini(), p);
    const GenRun plain = run_plain(m, ids, 40, greedy_params());
    for (int64_t k = 1; k <= 8; ++k) {
      k3::Speculator spec(std::make_unique<k3::NgramDrafter>(3), {k, 0});
      const GenRun s = run_spec(m, ids, 40, greedy_params(), spec);
      ASSERT_EQ(s.ids, plain.ids) << "prompt \"" << p << "\" k " << k;
      EXPECT_TRUE(same_state(s.seq, plain.seq)) << "prompt \"" << p << "\" k " << k;
      accepted += spec.stats().accepted;
      drafted += spec.stats().drafted;
    }
  }
  EXPECT_GT(accepted, 0);        // the accept path ran
  EXPECT_LT(accepted, drafted);  // and so did the reject + rollback path
}

// Draft model: the target as its own draft (every draft accepted) and a different random
// checkpoint (mostly rejected), k = 1..8, several prompts, on the tiny model.
TEST(Speculative, GreedyDraftModelMatchesPlainDecoding) {
  const Model& m = *k3test::tiny().model;
  const std::vector<std::string> prompts = {"abc", "hello world", "0123456789", "zz", "The quick brown fox"};
  for (const k3::LoadedModel* draft : {&k3test::tiny(), &tiny_other()}) {
    int64_t accepted = 0, drafted = 0;
    for (const std::string& p : prompts) {
      const std::vector<int32_t> ids = encode(k3test::tiny(), p);
      const GenRun plain = run_plain(m, ids, 24, greedy_params());
      for (int64_t k = 1; k <= 8; ++k) {
        k3::Speculator spec(std::make_unique<k3::DraftModelDrafter>(*draft->model, greedy_params(), 512), {k, 0});
        const GenRun s = run_spec(m, ids, 24, greedy_params(), spec);
        ASSERT_EQ(s.ids, plain.ids) << "prompt \"" << p << "\" k " << k;
        EXPECT_TRUE(same_state(s.seq, plain.seq)) << "prompt \"" << p << "\" k " << k;
        accepted += spec.stats().accepted;
        drafted += spec.stats().drafted;
      }
    }
    if (draft == &k3test::tiny()) {
      EXPECT_EQ(accepted, drafted);  // the model is its own perfect draft
    } else {
      EXPECT_LT(accepted, drafted);
    }
    EXPECT_GT(drafted, 0);
  }
}

// The shipped draft: K3-nano drafting for K3-mini (same tokenizer), k = 1..8.
TEST(Speculative, GreedyK3NanoDraftMatchesPlainDecoding) {
  const Model& m = *mini().model;
  static const k3::LoadedModel nano = k3::LoadedModel::open(std::filesystem::path(K3_SOURCE_DIR) / "models/k3-nano");
  for (const char* p : {"And God said", "Blessed are the meek: for they shall inherit", "And it came to pass"}) {
    const std::vector<int32_t> ids = encode(mini(), p);
    const GenRun plain = run_plain(m, ids, 32, greedy_params());
    for (int64_t k = 1; k <= 8; ++k) {
      k3::Speculator spec(std::make_unique<k3::DraftModelDrafter>(*nano.model, greedy_params(), 8192), {k, 0});
      const GenRun s = run_spec(m, ids, 32, greedy_params(), spec);
      ASSERT_EQ(s.ids, plain.ids) << "prompt \"" << p << "\" k " << k;
      EXPECT_TRUE(same_state(s.seq, plain.seq)) << "prompt \"" << p << "\" k " << k;
      EXPECT_GT(spec.stats().accepted, 0);
    }
  }
}

// The state after every accept: generating n = 1..16 ids speculatively leaves the state plain
// decoding leaves (so each intermediate position is covered), K3-mini as its own draft and
// prompt lookup.
TEST(Speculative, StateAfterEveryStepMatchesPlainDecoding) {
  const Model& m = *mini().model;
  const std::vector<int32_t> ids =
      encode(mini(), "And the evening and the morning were the first day. And the evening");
  for (int64_t n = 1; n <= 16; ++n) {
    const GenRun plain = run_plain(m, ids, n, greedy_params());
    k3::Speculator lookup(std::make_unique<k3::NgramDrafter>(2), {4, 0});
    k3::Speculator self(std::make_unique<k3::DraftModelDrafter>(m, greedy_params(), 8192), {3, 0});
    for (k3::Speculator* spec : {&lookup, &self}) {
      const GenRun s = run_spec(m, ids, n, greedy_params(), *spec);
      ASSERT_EQ(s.ids, plain.ids) << "n " << n;
      EXPECT_TRUE(same_state(s.seq, plain.seq)) << "n " << n;
    }
  }
}

// Stop ids and limits behave as in plain decoding: generation ends at the first stop id even
// when it is an accepted draft, and -n is never exceeded.
TEST(Speculative, StopIdsAndLimitsAsPlainDecoding) {
  const Model& m = *mini().model;
  const std::vector<int32_t> ids =
      encode(mini(), "And God said, Let there be light: and there was light. And God said");
  const GenRun full = run_plain(m, ids, 20, greedy_params());
  ASSERT_GE(full.ids.size(), 10u);
  for (size_t cut : {2u, 5u, 9u}) {
    const int32_t stop = full.ids[cut];
    auto go = [&](k3::Speculator* spec) {
      GenRun r{{}, m.new_sequence()};
      k3::Sampler s(greedy_params());
      k3::GenerateOptions o;
      o.n_predict = 20;
      o.stop_ids = {stop};
      o.speculative = spec;
      const k3::GenerateResult g = k3::generate(m, r.seq, ids, s, o, [](int32_t) { return true; });
      r.ids = g.ids;
      EXPECT_EQ(g.stop, k3::StopReason::StopToken);
      return r;
    };
    k3::Speculator self(std::make_unique<k3::DraftModelDrafter>(m, greedy_params(), 8192), {8, 0});
    const GenRun a = go(nullptr), b = go(&self);
    EXPECT_EQ(a.ids, b.ids);
    EXPECT_TRUE(same_state(a.seq, b.seq));
  }
}

// --- acceptance rule ------------------------------------------------------------------------

/// Pearson chi-square of `counts` (n samples) against probabilities `p` (bins with expected
/// count < 5 merged into one); returns (statistic, degrees of freedom).
std::pair<double, int> chi_square(const std::map<std::vector<int32_t>, int64_t>& counts,
                                  const std::map<std::vector<int32_t>, double>& p, int64_t n) {
  double stat = 0.0, small_e = 0.0, small_o = 0.0;
  int bins = 0;
  int64_t seen = 0;
  for (const auto& [key, pk] : p) {
    const double e = pk * static_cast<double>(n);
    const auto it = counts.find(key);
    const double o = it == counts.end() ? 0.0 : static_cast<double>(it->second);
    seen += static_cast<int64_t>(o);
    if (e < 5.0) {
      small_e += e;
      small_o += o;
      continue;
    }
    stat += (o - e) * (o - e) / e;
    ++bins;
  }
  small_o += static_cast<double>(n - seen);  // outcomes of probability 0 (must not occur)
  if (small_e > 0.0 || small_o > 0.0) {
    stat += (small_o - small_e) * (small_o - small_e) / std::max(small_e, 1e-9);
    ++bins;
  }
  return {stat, bins - 1};
}

/// Upper critical value of chi-square(df) at significance 0.001 (Wilson–Hilferty).
double chi2_crit_001(int df) {
  const double z = 3.090232, a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

// Temperature 1 (top-k 4, repeat penalty 1.3 so the chain's transforms matter): the first three
// sampled ids (the 2nd and 3rd come from a verify with one draft: accept / residual / bonus)
// follow the exact distribution computed from the model's rows with Sampler::weights.
// 10,000 samples, fixed seeds, chi-square at significance 0.001.
TEST(Speculative, SamplingDistributionMatchesPlainAtTemperatureOne) {
  const Model& m = *k3test::tiny().model;
  k3::SamplerParams sp;
  sp.temp = 1.0f;
  sp.top_k = 4;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  sp.repeat_penalty = 1.3f;
  const std::vector<int32_t> prompt = encode(k3test::tiny(), "a");  // one id: cheap per sample (ASan)
  // Exact P(t1, t2, t3) from the plain chain.
  std::map<std::vector<int32_t>, double> exact;
  {
    SequenceState s0 = m.new_sequence();
    const std::vector<float> l0 = m.forward(s0, prompt, false);
    k3::Sampler h(sp);
    for (int32_t id : prompt) h.accept(id);
    const auto w1 = h.weights(l0);
    for (size_t i = 0; i < w1.ids.size(); ++i) {
      SequenceState s1 = s0;
      k3::Sampler h1 = h;
      h1.accept(w1.ids[i]);
      const std::vector<float> l1 = m.forward(s1, std::span<const int32_t>(&w1.ids[i], 1), false);
      const auto w2 = h1.weights(l1);
      for (size_t j = 0; j < w2.ids.size(); ++j) {
        SequenceState s2 = s1;
        k3::Sampler h2 = h1;
        h2.accept(w2.ids[j]);
        const std::vector<float> l2 = m.forward(s2, std::span<const int32_t>(&w2.ids[j], 1), false);
        const auto w3 = h2.weights(l2);
        for (size_t l = 0; l < w3.ids.size(); ++l)
          exact[{w1.ids[i], w2.ids[j], w3.ids[l]}] = (w1.w[i] / w1.z) * (w2.w[j] / w2.z) * (w3.w[l] / w3.z);
      }
    }
  }
  constexpr int64_t kSamples = 10000;
  struct Case {
    const char* name;
    std::unique_ptr<k3::Drafter> drafter;
  };
  // The draft: the target itself sampled hotter and wider (q != p with overlapping supports; a
  // random other checkpoint shares no top-4 ids with it). One-hot q: the next test.
  k3::SamplerParams dp = sp;
  dp.seed = 77;
  dp.temp = 2.0f;
  dp.top_k = 8;
  Case cases[] = {{"draft model (q != p)", std::make_unique<k3::DraftModelDrafter>(m, dp, 512)}};
  for (Case& c : cases) {
    k3::Speculator spec(std::move(c.drafter), {2, 0});
    std::map<std::vector<int32_t>, int64_t> counts;
    for (int64_t n = 0; n < kSamples; ++n) {
      k3::SamplerParams p = sp;
      p.seed = 1000 + static_cast<uint64_t>(n);
      const GenRun r = run_spec(m, prompt, 3, p, spec);
      ASSERT_EQ(r.ids.size(), 3u);
      ++counts[r.ids];
    }
    const auto [stat, df] = chi_square(counts, exact, kSamples);
    EXPECT_LT(stat, chi2_crit_001(df)) << c.name << ": chi-square " << stat << " with " << df << " df";
    EXPECT_GT(spec.stats().accepted, kSamples / 20) << c.name;
    std::printf("%s: chi-square %.1f, %d df (critical %.1f at 0.001); %s\n", c.name, stat, df, chi2_crit_001(df),
                spec.stats().describe().c_str());
    EXPECT_LT(spec.stats().accepted, spec.stats().drafted) << c.name;
  }
}

// The acceptance rule alone on synthetic rows: p = q never rejects, a one-hot q on an id of
// probability 0 always rejects into p.
TEST(Speculative, AcceptanceRuleEdgeCases) {
  k3::SamplerParams sp;
  sp.temp = 1.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  const std::vector<float> row = {0.5f, -1.0f, 2.0f, 0.0f, -INFINITY};
  const std::span<const float> rows2[2] = {row, row};
  k3::Sampler s(sp);
  int64_t accepted = 0;
  for (int i = 0; i < 2000; ++i) {
    k3::Draft d;
    d.ids = {static_cast<int32_t>(i % 4)};
    d.q = {s.weights(row)};
    const auto out = k3::accept_drafts(s, rows2, d, nullptr);
    ASSERT_FALSE(out.empty());
    accepted += out.size() == 2;
  }
  EXPECT_EQ(accepted, 2000);
  for (int i = 0; i < 200; ++i) {
    k3::Draft d;
    d.ids = {4};  // logit -inf: p = 0
    const auto out = k3::accept_drafts(s, rows2, d, nullptr);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_NE(out[0], 4);
  }
  k3::Draft bad;
  bad.ids = {1, 2};
  EXPECT_THROW(k3::accept_drafts(s, rows2, bad, nullptr), k3::Error);
}

// The rule alone, 100,000 draws on synthetic rows (fast): the first emitted id follows p for a
// one-hot q (prompt lookup) on a likely and on an unlikely id, and for a q far from p; the
// second (bonus / next) id follows p's second row given an accepted first. Chi-square at 0.001.
TEST(Speculative, AcceptanceRuleGivesTargetDistribution) {
  k3::SamplerParams sp;
  sp.temp = 1.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  sp.seed = 5;
  const std::vector<float> r0 = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f, -0.5f};
  const std::vector<float> r1 = {1.5f, 0.2f, -2.0f, 0.7f, 0.0f, 1.0f};
  const std::vector<float> qr = {-1.0f, 2.0f, 0.0f, 1.5f, -3.0f, 0.5f};
  const std::span<const float> rows[2] = {r0, r1};
  k3::Sampler ref(sp);
  const auto p0 = ref.weights(r0), p1 = ref.weights(r1);
  std::map<std::vector<int32_t>, double> exact0;
  for (size_t i = 0; i < p0.ids.size(); ++i) exact0[{p0.ids[i]}] = p0.w[i] / p0.z;
  std::map<std::vector<int32_t>, double> exact1;
  for (size_t i = 0; i < p1.ids.size(); ++i) exact1[{p1.ids[i]}] = p1.w[i] / p1.z;
  struct Case {
    const char* name;
    int32_t id;
    bool one_hot;
  } cases[] = {{"one-hot q, likely id", 2, true}, {"one-hot q, unlikely id", 1, true}, {"q far from p", 0, false}};
  constexpr int64_t kDraws = 100000;
  for (const Case& c : cases) {
    k3::Sampler s(sp);
    k3::Sampler qs(sp);
    std::map<std::vector<int32_t>, int64_t> first, second;
    int64_t n_second = 0;
    for (int64_t n = 0; n < kDraws; ++n) {
      k3::Draft d;
      if (c.one_hot) {
        d.ids = {c.id};
      } else {
        d.q = {qs.weights(qr)};
        d.ids = {qs.sample(qr)};
      }
      const auto out = k3::accept_drafts(s, rows, d, nullptr);
      ++first[{out[0]}];
      if (out.size() == 2) {
        ++second[{out[1]}];
        ++n_second;
      }
    }
    const auto [st0, df0] = chi_square(first, exact0, kDraws);
    EXPECT_LT(st0, chi2_crit_001(df0)) << c.name << ": first id chi-square " << st0;
    const auto [st1, df1] = chi_square(second, exact1, n_second);
    EXPECT_LT(st1, chi2_crit_001(df1)) << c.name << ": bonus id chi-square " << st1;
    EXPECT_GT(n_second, kDraws / 100) << c.name;  // both paths ran (p(unlikely id) = 0.026)
  }
}

// --- errors ---------------------------------------------------------------------------------

TEST(Speculative, BadOptionsAndIncompatibleDraftAreNamedErrors) {
  auto msg = [](auto f) {
    try {
      f();
    } catch (const k3::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(msg([] { k3::SpecOptions{0, 0}.validate(); }).find("--draft-max"), std::string::npos);
  EXPECT_NE(msg([] { k3::SpecOptions{4, 5}.validate(); }).find("--draft-min"), std::string::npos);
  EXPECT_NE(msg([] { k3::NgramDrafter(0); }).find("--spec-ngram-size-n"), std::string::npos);
  const std::string e =
      msg([] { k3::check_draft_compatible(mini().model->config(), k3test::tiny().model->config(), "a", "a"); });
  EXPECT_NE(e.find("--draft-model"), std::string::npos) << e;
  EXPECT_NE(e.find("vocab_size 512"), std::string::npos) << e;
  EXPECT_NE(msg([] {
              k3::check_draft_compatible(mini().model->config(), mini().model->config(), "a", "b");
            }).find("tiktoken.model"),
            std::string::npos);
}

}  // namespace
