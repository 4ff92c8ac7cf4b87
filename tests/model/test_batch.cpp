// Model::forward_batch — the one forward path over a batch of sequences — against lone
// forward() calls: logits and states bit-identical whatever else is in the batch (prefill
// pieces of different lengths next to decode rows, several sequences at different positions,
// both kernel paths, 1 and 2 threads), on the tiny checkpoints and on models/k3-mini.
#include <gtest/gtest.h>

#include <filesystem>
#include <span>
#include <vector>

#include "core/error.h"
#include "io/checkpoint.h"
#include "kernels/threads.h"
#include "model/k3_model.h"
#include "model/sequence_state.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;

std::vector<int32_t> ids_of(int n, int64_t vocab, int seed) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 131 + seed * 17 + 7) % vocab);
  return v;
}

k3::ModelOptions opts(k3::ModelKernels k, int64_t chunk) {
  k3::ModelOptions o;
  o.exec.kernels = k;
  o.prefill_chunk = chunk;
  return o;
}

struct ScopedThreads {
  int saved = k3::num_threads();
  explicit ScopedThreads(int n) { k3::set_num_threads(n); }
  ~ScopedThreads() { k3::set_num_threads(saved); }
};

/// Every layer's state of a and b bit-identical.
void expect_same_state(const k3::SequenceState& a, const k3::SequenceState& b) {
  ASSERT_EQ(a.n_past(), b.n_past());
  EXPECT_EQ(k3::state_difference(a, b), "");
}

/// Three sequences advanced over several batched steps (prefill pieces of mixed lengths, one
/// crossing prefill_chunk, next to decode rows) give the logits and states of lone calls.
void check_batch_equals_lone(const k3::Model& m) {
  const int64_t V = m.config().vocab_size;
  // Per step, tokens for each of 3 sequences (empty = not in this step's batch).
  const std::vector<std::vector<int>> lens = {{70, 5, 0}, {1, 33, 9}, {1, 1, 1}, {0, 1, 300}, {1, 1, 1}};
  std::vector<k3::SequenceState> batched, lone;
  for (int s = 0; s < 3; ++s) {
    batched.push_back(m.new_sequence());
    lone.push_back(m.new_sequence());
  }
  int seed = 0;
  for (size_t step = 0; step < lens.size(); ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<std::vector<int32_t>> toks(3);
    std::vector<k3::BatchEntry> batch;
    std::vector<int> who;
    for (int s = 0; s < 3; ++s) {
      if (lens[step][s] == 0) continue;
      toks[s] = ids_of(lens[step][s], V, ++seed);
      const auto mode = (s + step) % 3 == 0   ? k3::BatchLogits::All
                        : (s + step) % 3 == 1 ? k3::BatchLogits::Last
                                              : k3::BatchLogits::None;
      batch.push_back({&batched[s], toks[s], mode});
      who.push_back(s);
    }
    const auto out = m.forward_batch(batch);
    ASSERT_EQ(out.size(), batch.size());
    for (size_t e = 0; e < batch.size(); ++e) {
      const int s = who[e];
      SCOPED_TRACE("sequence " + std::to_string(s));
      const auto alone = m.forward(lone[s], toks[s], batch[e].logits == k3::BatchLogits::All);
      if (batch[e].logits == k3::BatchLogits::None) EXPECT_TRUE(out[e].empty());
      else EXPECT_EQ(out[e], alone);  // bitwise
      expect_same_state(batched[s], lone[s]);
    }
  }
}

std::vector<fs::path> models() {
  std::vector<fs::path> dirs = {k3test::tiny_checkpoint("k3", 5), k3test::tiny_checkpoint("kimi_linear_gate", 5)};
  const fs::path mini = fs::path(K3_SOURCE_DIR) / "models" / "k3-mini";
  if (fs::exists(mini / "config.json")) dirs.push_back(mini);
  return dirs;
}

TEST(ForwardBatch, BitIdenticalToLoneCallsFastPath) {
  for (const fs::path& dir : models()) {
    SCOPED_TRACE(dir.string());
    auto ck = k3::Checkpoint::open(dir);
    for (int threads : {1, 2}) {
      SCOPED_TRACE("threads " + std::to_string(threads));
      ScopedThreads t(threads);
      const k3::Model m(*ck, opts(k3::ModelKernels::Fast, 64));
      check_batch_equals_lone(m);
    }
  }
}

TEST(ForwardBatch, BitIdenticalToLoneCallsReferencePath) {
  ScopedThreads t(1);
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("k3", 5));
  const k3::Model m(*ck, opts(k3::ModelKernels::Reference, 64));
  check_batch_equals_lone(m);
}

TEST(ForwardBatch, BadBatchesAreRefusedWithoutTouchingStates) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("k3", 5));
  const k3::Model m(*ck, opts(k3::ModelKernels::Fast, 64));
  const int64_t V = m.config().vocab_size;
  auto a = m.new_sequence(), b = m.new_sequence();
  const std::vector<int32_t> ok = {1, 2, 3}, bad = {1, static_cast<int32_t>(V)};
  EXPECT_THROW(m.forward_batch({}), k3::Error);
  {
    const std::vector<k3::BatchEntry> dup = {{&a, ok}, {&a, ok}};
    EXPECT_THROW(m.forward_batch(dup), k3::Error);
  }
  {
    const std::vector<k3::BatchEntry> oob = {{&a, ok}, {&b, bad}};
    try {
      m.forward_batch(oob);
      FAIL() << "expected k3::Error";
    } catch (const k3::Error& e) {
      EXPECT_NE(std::string(e.what()).find("batch entry 1"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("position 1"), std::string::npos) << e.what();
    }
  }
  {
    const std::vector<k3::BatchEntry> empty = {{&a, ok}, {&b, {}}};
    EXPECT_THROW(m.forward_batch(empty), k3::Error);
    const std::vector<k3::BatchEntry> null_state = {{nullptr, ok}};
    EXPECT_THROW(m.forward_batch(null_state), k3::Error);
  }
  EXPECT_EQ(a.n_past(), 0);
  EXPECT_EQ(b.n_past(), 0);
  // Still usable afterwards.
  const std::vector<k3::BatchEntry> good = {{&a, ok}, {&b, ok}};
  const auto out = m.forward_batch(good);
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(a.n_past(), 3);
}

}  // namespace
