// k3::PrefillGrid (model/prefill_grid.h): the piece and resume rules, and on a tiny checkpoint
// that a prefill cut where the grid says (pieces by piece_end, a resume at resume_point,
// a lone last token when max_resume allows it) gives the one-pass prefill's logits and state bit for bit.
#include <gtest/gtest.h>

#include <span>
#include <vector>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/k3_model.h"
#include "model/prefill_grid.h"
#include "model/sequence_state.h"
#include "test_util.h"

namespace {

TEST(PrefillGrid, RejectsChunkBelowOne) {
  EXPECT_THROW(k3::PrefillGrid(0), k3::Error);
  EXPECT_THROW(k3::PrefillGrid(-3), k3::Error);
}

TEST(PrefillGrid, GrainIsTheKdaChunkWhenTheChunkIsAMultipleOf64) {
  EXPECT_EQ(k3::PrefillGrid(256).exact_grain(), 64);
  EXPECT_EQ(k3::PrefillGrid(64).exact_grain(), 64);
  EXPECT_EQ(k3::PrefillGrid(96).exact_grain(), 96);
  EXPECT_EQ(k3::PrefillGrid(1).exact_grain(), 1);
  const k3::PrefillGrid g(256);
  EXPECT_FALSE(g.is_exact_resume(0));
  EXPECT_TRUE(g.is_exact_resume(64));
  EXPECT_TRUE(g.is_exact_resume(320));
  EXPECT_FALSE(g.is_exact_resume(65));
  EXPECT_EQ(g.max_decode_window(), 256);
  EXPECT_EQ(g.chunk(), 256);
}

TEST(PrefillGrid, PieceEndTakesTheRestOrWholeChunksWithinTheBudget) {
  const k3::PrefillGrid g(128);
  EXPECT_EQ(g.piece_end(0, 100, 512), 100);   // the rest fits
  EXPECT_EQ(g.piece_end(0, 1000, 512), 512);  // four whole chunks
  EXPECT_EQ(g.piece_end(64, 1000, 300), 64 + 256);
  EXPECT_EQ(g.piece_end(64, 1000, 100), 64);  // no whole chunk fits
  EXPECT_EQ(g.piece_end(64, 1000, -5), 64);
  EXPECT_EQ(g.piece_end(64, 70, 6), 70);
}

TEST(PrefillGrid, ResumePointsLeaveALoneLastTokenOnlyOnTheChunkGrid) {
  const k3::PrefillGrid g(128);
  EXPECT_EQ(g.max_resume(0), 0);
  EXPECT_EQ(g.max_resume(1), 0);
  EXPECT_EQ(g.max_resume(2), 0);      // n - 2
  EXPECT_EQ(g.max_resume(129), 128);  // the lone 129th token starts a piece of the one-pass prefill
  EXPECT_EQ(g.max_resume(130), 128);
  EXPECT_EQ(g.max_resume(200), 198);
  EXPECT_EQ(g.resume_point(200), 192);
  EXPECT_EQ(g.resume_point(192), 192);  // on the grain: the whole prompt
  EXPECT_EQ(g.resume_point(65), 0);     // max_resume 63 holds no grain multiple
  EXPECT_EQ(g.resume_point(129), 128);
  const k3::PrefillGrid odd(100);  // not a multiple of 64: the grain is the chunk
  EXPECT_EQ(odd.resume_point(250), 200);
  EXPECT_EQ(odd.max_resume(101), 100);
}

std::vector<int32_t> ids_of(int n, int64_t vocab) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<int32_t>((i * 131 + 7) % vocab);
  return v;
}

/// Prefills `prompt` in pieces cut by the grid (budget per piece), resuming from a copy of the
/// state at `resume` (0: none), and returns the last logits row.
std::vector<float> prefill_on_grid(const k3::Model& m, k3::SequenceState& seq, std::span<const int32_t> prompt,
                                   int64_t resume, int64_t budget) {
  const k3::PrefillGrid g = m.prefill_grid();
  std::vector<float> logits;
  int64_t pos = 0;
  const int64_t n = static_cast<int64_t>(prompt.size());
  auto run_to = [&](int64_t stop) {
    while (pos < stop) {
      int64_t end = g.piece_end(pos, stop, budget);
      if (end == pos) end = g.piece_end(pos, stop, g.chunk());
      logits = m.forward(seq, prompt.subspan(static_cast<size_t>(pos), static_cast<size_t>(end - pos)), false);
      pos = end;
    }
  };
  run_to(resume);
  k3::SequenceState resumed = seq;  // a kept copy continues
  seq = std::move(resumed);
  run_to(n);
  return logits;
}

TEST(PrefillGrid, CutsTheGridAllowsAreBitIdenticalToOnePass) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("k3", 5));
  k3::ModelOptions o;
  o.prefill_chunk = 128;
  const k3::Model m(*ck, o);
  const k3::PrefillGrid g = m.prefill_grid();
  const int64_t V = m.config().vocab_size;
  for (int n : {200, 129, 256, 70}) {
    SCOPED_TRACE("prompt " + std::to_string(n));
    const std::vector<int32_t> prompt = ids_of(n, V);
    k3::SequenceState one = m.new_sequence();
    const std::vector<float> want = m.forward(one, prompt, false);
    for (int64_t resume : {int64_t{0}, g.resume_point(n)}) {
      SCOPED_TRACE("resume at " + std::to_string(resume));
      k3::SequenceState seq = m.new_sequence();
      EXPECT_EQ(prefill_on_grid(m, seq, prompt, resume, 256), want);
      ASSERT_EQ(seq.n_past(), one.n_past());
      EXPECT_EQ(k3::state_difference(seq, one), "");
    }
  }
}

}  // namespace
