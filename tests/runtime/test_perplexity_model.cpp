// perplexity() on the tiny checkpoint against a literal implementation of the definition
// (one all-logits forward per window, fresh state each) and the one-window closed form.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/perplexity.h"
#include "runtime_test_util.h"

namespace {

std::vector<int32_t> text_ids(int n) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((i * 53 + 7) % 256);
  return ids;
}

// The definition, written out: window starts 0, stride, 2·stride...; fresh state; all logits.
double literal_ppl(const k3::Model& m, const std::vector<int32_t>& t, int64_t ctx, int64_t stride, int64_t* n_scored) {
  const int64_t n = static_cast<int64_t>(t.size());
  const std::size_t V = static_cast<std::size_t>(m.config().vocab_size);
  double sum = 0;
  int64_t cnt = 0, done = 1;
  for (int64_t s = 0; done < n; s += stride) {
    const int64_t e = std::min(s + ctx, n);
    k3::SequenceState st = m.new_sequence();
    const std::vector<int32_t> win(t.begin() + s, t.begin() + e);
    const std::vector<float> lg = m.forward(st, win, true);
    for (int64_t tgt = done; tgt < e; ++tgt) {
      const float* row = lg.data() + static_cast<std::size_t>(tgt - 1 - s) * V;
      double mx = -INFINITY, z = 0;
      for (std::size_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      for (std::size_t v = 0; v < V; ++v) z += std::exp(row[v] - mx);
      sum += -(row[t[static_cast<std::size_t>(tgt)]] - mx - std::log(z));
      ++cnt;
    }
    done = e;
  }
  *n_scored = cnt;
  return std::exp(sum / static_cast<double>(cnt));
}

}  // namespace

TEST(PerplexityModel, MatchesLiteralDefinition) {
  const auto& lm = k3test::tiny();
  const auto ids = text_ids(45);
  for (auto [ctx, stride, batch] :
       {std::tuple<int64_t, int64_t, int64_t>{16, 8, 512}, {16, 8, 3}, {16, 5, 7}, {64, 32, 512}}) {
    k3::PerplexityOptions o;
    o.n_ctx = ctx;
    o.stride = stride;
    o.n_batch = batch;
    int64_t windows_seen = 0;
    o.on_window = [&](int64_t done, int64_t total) {
      EXPECT_EQ(done, ++windows_seen);
      EXPECT_EQ(total, static_cast<int64_t>(k3::perplexity_windows(45, ctx, stride).size()));
    };
    const auto r = k3::perplexity(*lm.model, ids, o);
    int64_t n_scored = 0;
    const double want = literal_ppl(*lm.model, ids, ctx, stride, &n_scored);
    EXPECT_EQ(r.n_scored, 44);
    EXPECT_EQ(n_scored, 44);
    EXPECT_EQ(windows_seen, r.n_windows);
    EXPECT_NEAR(r.ppl / want, 1.0, 1e-5) << "ctx " << ctx << " stride " << stride << " batch " << batch;
    EXPECT_NEAR(std::log(r.ppl), r.mean_nll, 1e-12);
    EXPECT_GT(r.ppl_err, 0.0);
    EXPECT_GT(r.ppl, 1.0);
  }
}

TEST(PerplexityModel, DefaultStrideIsHalfTheContext) {
  const auto& lm = k3test::tiny();
  const auto ids = text_ids(40);
  k3::PerplexityOptions a, b;
  a.n_ctx = b.n_ctx = 16;
  b.stride = 8;
  const auto ra = k3::perplexity(*lm.model, ids, a), rb = k3::perplexity(*lm.model, ids, b);
  EXPECT_EQ(ra.n_windows, 4);
  EXPECT_EQ(ra.ppl, rb.ppl);
}
