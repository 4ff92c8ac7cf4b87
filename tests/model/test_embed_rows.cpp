// BatchEntry::embeds (the image path's input override, model/k3_model.h): rows given as vectors
// enter the first layer in place of embedding-table rows. A forward whose given rows are the
// table rows of other ids equals the forward of those ids, bit for bit, whatever the prefill
// pieces and the batch; bad ranges are refused before any state changes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "core/error.h"
#include "io/checkpoint.h"
#include "kernels/ref/linear.h"
#include "model/k3_model.h"
#include "model/sequence_state.h"
#include "test_util.h"

namespace {

std::vector<int32_t> ids_of(int n, int64_t vocab, int seed) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 131 + seed * 17 + 7) % vocab);
  return v;
}

/// Table rows of `ids` [n, D] float32.
std::vector<float> table_rows(const k3::Checkpoint& ck, std::span<const int32_t> ids, int64_t D) {
  std::vector<float> r(ids.size() * static_cast<size_t>(D));
  const k3::TensorView& e = ck.get("model.embed_tokens.weight");
  for (size_t i = 0; i < ids.size(); ++i) k3::ref::decode_row(e, ids[i], r.data() + i * D);
  return r;
}

k3::ModelOptions opts(k3::ModelKernels k, int64_t chunk) {
  k3::ModelOptions o;
  o.exec.kernels = k;
  o.prefill_chunk = chunk;
  return o;
}

// "image" rows [pos, pos + n) of a prompt: the table rows of other ids (`alt`), placed over pad
// ids; the forward with them must equal the forward of the prompt holding `alt` there.
void check_override_equals_ids(k3::ModelKernels kernels, int64_t chunk) {
  const auto dir = k3test::tiny_checkpoint("k3", 1);
  auto ck = k3::Checkpoint::open(dir);
  const k3::Model m(*ck, opts(kernels, chunk));
  const int64_t V = m.config().vocab_size, D = m.config().hidden_size;
  const int T = 40, pos = 5, n = 21;  // the image crosses piece boundaries for chunk 8 and 16
  std::vector<int32_t> with_pads = ids_of(T, V, 1);
  std::vector<int32_t> alt = ids_of(n, V, 2);
  std::vector<int32_t> truth = with_pads;
  for (int i = 0; i < n; ++i) {
    with_pads[pos + i] = 3;  // a stand-in pad id: its table row must never be read
    truth[pos + i] = alt[i];
  }
  const std::vector<float> rows = table_rows(*ck, alt, D);
  const k3::EmbedRows er{pos, n, rows};
  k3::SequenceState a = m.new_sequence(), b = m.new_sequence();
  const std::vector<float> la = m.forward(a, with_pads, std::span<const k3::EmbedRows>(&er, 1), true);
  const std::vector<float> lb = m.forward(b, truth, true);
  ASSERT_EQ(la.size(), static_cast<size_t>(T * V));
  EXPECT_EQ(la, lb);
  EXPECT_EQ(k3::state_difference(a, b), "");
  // and a different image gives different logits after it
  std::vector<float> other = rows;
  for (float& x : other) x = -x;
  const k3::EmbedRows eo{pos, n, other};
  k3::SequenceState c = m.new_sequence();
  const std::vector<float> lc = m.forward(c, with_pads, std::span<const k3::EmbedRows>(&eo, 1), false);
  EXPECT_NE(std::vector<float>(la.end() - V, la.end()), lc);
}

TEST(EmbedRows, OverrideEqualsTheIdsWhoseRowsItHoldsFast) { check_override_equals_ids(k3::ModelKernels::Fast, 256); }
TEST(EmbedRows, OverrideEqualsTheIdsWhoseRowsItHoldsReference) {
  check_override_equals_ids(k3::ModelKernels::Reference, 256);
}
TEST(EmbedRows, PrefillPiecesCutTheImageExactly) {
  check_override_equals_ids(k3::ModelKernels::Fast, 8);
  check_override_equals_ids(k3::ModelKernels::Fast, 16);
}

// Fed as separate forward calls on the prefill grid (the generator's prefill chunks): each call
// gets its part of the rows, positions relative to its first token; equal to the one-call result.
TEST(EmbedRows, SplitCallsEqualOneCall) {
  const auto dir = k3test::tiny_checkpoint("k3", 1);
  auto ck = k3::Checkpoint::open(dir);
  const k3::Model m(*ck, opts(k3::ModelKernels::Fast, 64));
  const int64_t V = m.config().vocab_size, D = m.config().hidden_size;
  std::vector<int32_t> ids = ids_of(130, V, 3);
  const std::vector<float> rows = table_rows(*ck, ids_of(40, V, 4), D);
  const k3::EmbedRows er{50, 40, rows};
  k3::SequenceState one = m.new_sequence(), two = m.new_sequence();
  const std::vector<float> l1 = m.forward(one, ids, std::span<const k3::EmbedRows>(&er, 1), false);
  // calls [0, 64) and [64, 130): the image [50, 90) is split 14 + 26
  const k3::EmbedRows first{50, 14, std::span<const float>(rows).first(14 * D)};
  const k3::EmbedRows second{0, 26, std::span<const float>(rows).subspan(14 * D)};
  m.forward(two, std::span<const int32_t>(ids).first(64), std::span<const k3::EmbedRows>(&first, 1), false);
  const std::vector<float> l2 =
      m.forward(two, std::span<const int32_t>(ids).subspan(64), std::span<const k3::EmbedRows>(&second, 1), false);
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(k3::state_difference(one, two), "");
}

// In a batch next to other sequences: bit-identical to the lone call.
TEST(EmbedRows, BatchEqualsLoneCalls) {
  const auto dir = k3test::tiny_checkpoint("k3", 1);
  auto ck = k3::Checkpoint::open(dir);
  const k3::Model m(*ck, opts(k3::ModelKernels::Fast, 16));
  const int64_t V = m.config().vocab_size, D = m.config().hidden_size;
  const std::vector<int32_t> a_ids = ids_of(37, V, 5), b_ids = ids_of(9, V, 6);
  const std::vector<float> rows = table_rows(*ck, ids_of(12, V, 7), D);
  const k3::EmbedRows er{14, 12, rows};
  k3::SequenceState a1 = m.new_sequence(), b1 = m.new_sequence(), a2 = m.new_sequence(), b2 = m.new_sequence();
  k3::BatchEntry ea{&a1, a_ids, k3::BatchLogits::All};
  ea.embeds = std::span<const k3::EmbedRows>(&er, 1);
  const k3::BatchEntry eb{&b1, b_ids, k3::BatchLogits::All};
  const std::vector<k3::BatchEntry> batch{eb, ea};
  const auto got = m.forward_batch(batch);
  EXPECT_EQ(got[1], m.forward(a2, a_ids, std::span<const k3::EmbedRows>(&er, 1), true));
  EXPECT_EQ(got[0], m.forward(b2, b_ids, true));
}

TEST(EmbedRows, BadRangesAreRefusedBeforeTheStateChanges) {
  const auto dir = k3test::tiny_checkpoint("k3", 1);
  auto ck = k3::Checkpoint::open(dir);
  const k3::Model m(*ck, opts(k3::ModelKernels::Fast, 64));
  const int64_t V = m.config().vocab_size, D = m.config().hidden_size;
  const std::vector<int32_t> ids = ids_of(10, V, 8);
  std::vector<float> rows(static_cast<size_t>(4 * D), 0.5f);
  k3::SequenceState s = m.new_sequence();
  auto refused = [&](k3::EmbedRows er, const std::string& needle) {
    try {
      m.forward(s, ids, std::span<const k3::EmbedRows>(&er, 1), false);
      ADD_FAILURE() << "accepted " << needle;
    } catch (const k3::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(s.n_past(), 0);
  };
  refused({8, 4, rows}, "inside the 10 tokens");                                  // past the end
  refused({std::numeric_limits<int64_t>::max() - 1, 5, rows}, "inside the 10 tokens");  // pos + n overflows
  refused({0, 0, {}}, "non-empty");                                               // empty
  refused({2, 3, rows}, "expected n * hidden_size");                              // wrong size
  rows[7] = std::numeric_limits<float>::quiet_NaN();
  refused({2, 4, rows}, "value 7 is not finite");
  rows[7] = 0.f;
  const k3::EmbedRows two[2] = {{4, 4, rows}, {6, 4, rows}};  // overlapping
  EXPECT_THROW(m.forward(s, ids, two, false), k3::Error);
  EXPECT_EQ(s.n_past(), 0);
}

}  // namespace
