// k3::SequenceDecoder (runtime/sequence_decoder.h): the one place for the decode rules — the
// order stop id / stream / context / length, the draft caps, the accepted prefix of a verify
// window and the ids the state keeps — on synthetic logits rows (no model).
#include <gtest/gtest.h>

#include <span>
#include <vector>

#include "core/error.h"
#include "runtime/sequence_decoder.h"

namespace {

constexpr int64_t kVocab = 8;

/// A logits row whose argmax is `id`.
std::vector<float> row_for(int32_t id) {
  std::vector<float> r(kVocab, 0.f);
  r[static_cast<size_t>(id)] = 5.f;
  return r;
}

k3::SamplerParams greedy() {
  k3::SamplerParams p;
  p.temp = 0.f;
  return p;
}

k3::SequenceDecoder make(int64_t max_tokens, int64_t n_ctx, std::vector<int32_t> stops = {}, int64_t chunk = 256) {
  k3::DecodeLimits lim;
  lim.max_tokens = max_tokens;
  lim.n_ctx = n_ctx;
  lim.n_vocab = kVocab;
  lim.stop_ids = std::move(stops);
  return k3::SequenceDecoder(lim, k3::PrefillGrid(chunk));
}

/// One plain step on a row whose argmax is `id`; streamed ids go to *out.
k3::DecodeStep plain(k3::SequenceDecoder& d, k3::Sampler& s, int32_t id, int64_t n_after, std::vector<int32_t>* out,
                     bool accept_stream = true) {
  const std::vector<float> r = row_for(id);
  const std::span<const float> row(r);
  return d.step(s, std::span<const std::span<const float>>(&row, 1), k3::Draft{}, n_after, [&](int32_t x, size_t) {
    out->push_back(x);
    return accept_stream;
  });
}

TEST(SequenceDecoder, RejectsBadLimits) {
  k3::DecodeLimits lim;
  lim.n_vocab = 4;
  lim.max_tokens = -2;
  EXPECT_THROW(k3::SequenceDecoder(lim, k3::PrefillGrid(64)), k3::Error);
  lim.max_tokens = 1;
  lim.n_ctx = 1;
  EXPECT_THROW(k3::SequenceDecoder(lim, k3::PrefillGrid(64)), k3::Error);
  lim.n_ctx = 8;
  lim.n_vocab = 0;
  EXPECT_THROW(k3::SequenceDecoder(lim, k3::PrefillGrid(64)), k3::Error);
}

TEST(SequenceDecoder, StopIdEndsWithoutStreamingIt) {
  k3::SequenceDecoder d = make(-1, 100, {3});
  k3::Sampler s(greedy());
  std::vector<int32_t> streamed;
  EXPECT_EQ(plain(d, s, 5, 10, &streamed).n_emitted, 1);
  EXPECT_FALSE(d.done());
  const k3::DecodeStep st = plain(d, s, 3, 11, &streamed);
  EXPECT_EQ(st.n_emitted, 1);
  EXPECT_EQ(d.end(), k3::DecodeEnd::StopId);
  EXPECT_EQ(d.stop_id(), 3);
  EXPECT_EQ(d.n_emitted(), 2);
  EXPECT_EQ(streamed, (std::vector<int32_t>{5}));
  EXPECT_THROW(plain(d, s, 1, 12, &streamed), k3::Error);  // the sequence ended
}

TEST(SequenceDecoder, ContextIsCheckedBeforeLengthAfterTheStream) {
  k3::Sampler s(greedy());
  std::vector<int32_t> streamed;
  {  // 8 held + the pending id reach n_ctx 9, and max_tokens 1 too: the context wins
    k3::SequenceDecoder d = make(1, 9);
    plain(d, s, 2, 8, &streamed);
    EXPECT_EQ(d.end(), k3::DecodeEnd::ContextFull);
  }
  {
    k3::SequenceDecoder d = make(2, 100);
    plain(d, s, 2, 8, &streamed);
    EXPECT_FALSE(d.done());
    plain(d, s, 4, 9, &streamed);
    EXPECT_EQ(d.end(), k3::DecodeEnd::MaxTokens);
  }
  {  // a declined id is emitted (counted) and ends the sequence
    k3::SequenceDecoder d = make(-1, 100);
    plain(d, s, 6, 8, &streamed, false);
    EXPECT_EQ(d.end(), k3::DecodeEnd::Cancelled);
    EXPECT_EQ(d.n_emitted(), 1);
  }
  EXPECT_EQ(streamed, (std::vector<int32_t>{2, 2, 4, 6}));
}

TEST(SequenceDecoder, ForcedIdReplacesSampling) {
  k3::SequenceDecoder d = make(-1, 100);
  k3::Sampler s(greedy());
  const std::vector<float> r = row_for(1);
  const std::span<const float> row(r);
  const int32_t forced = 7;
  std::vector<int32_t> streamed;
  const k3::DecodeStep st = d.step(
      s, std::span<const std::span<const float>>(&row, 1), k3::Draft{}, 5,
      [&](int32_t x, size_t) {
        streamed.push_back(x);
        return true;
      },
      &forced);
  EXPECT_EQ(st.ids, (std::vector<int32_t>{7}));
  EXPECT_EQ(streamed, (std::vector<int32_t>{7}));
}

TEST(SequenceDecoder, DraftCapsFollowLengthContextAndWindow) {
  k3::SequenceDecoder d = make(10, 100, {}, 4);
  EXPECT_EQ(d.draft_cap(0, 8), 3);   // one decode-form window of chunk 4: 3 drafts
  EXPECT_EQ(d.draft_cap(95, 8), 3);  // 100 - 2 - 95
  EXPECT_EQ(d.draft_cap(97, 8), 1);
  EXPECT_EQ(d.draft_cap(98, 8), 0);
  k3::SequenceDecoder e = make(3, 100);
  EXPECT_EQ(e.draft_cap(0, 8), 2);  // 3 emitted at most: 2 drafts + the target's id
  k3::Draft dr;
  dr.ids = {1, 2, 9, 3};  // 9 is outside the vocabulary: the draft stops there
  e.cap_draft(dr, 8, 0);
  EXPECT_EQ(dr.ids, (std::vector<int32_t>{1, 2}));
  dr.ids = {1, 2, 3, 4};
  e.cap_draft(dr, 3, 0);
  EXPECT_EQ(dr.ids, (std::vector<int32_t>{1, 2, 3}));
  e.cap_draft(dr, 3, 4);  // fewer than draft_min: none
  EXPECT_TRUE(dr.ids.empty());
}

TEST(SequenceDecoder, VerifyKeepsTheAcceptedPrefixAndRollsBackTheRest) {
  k3::SequenceDecoder d = make(-1, 100);
  k3::Sampler s(greedy());
  // Window [pending, 4, 5, 6] after 20 held ids: rows agree with 4 and 5, then say 1.
  k3::Draft dr;
  dr.ids = {4, 5, 6};
  const std::vector<std::vector<float>> r = {row_for(4), row_for(5), row_for(1), row_for(2)};
  std::vector<std::span<const float>> rows(r.begin(), r.end());
  std::vector<std::pair<int32_t, size_t>> streamed;
  const k3::DecodeStep st = d.step(s, rows, dr, 24, [&](int32_t x, size_t m) {
    streamed.push_back({x, m});
    return true;
  });
  EXPECT_EQ(st.ids, (std::vector<int32_t>{4, 5, 1}));
  EXPECT_EQ(st.n_emitted, 3);
  EXPECT_EQ(st.accepted, 2);
  EXPECT_EQ(st.accepted_emitted, 2);
  EXPECT_EQ(st.keep(), 3);
  EXPECT_TRUE(st.needs_rollback());  // the window's 4th id (6) is dropped
  EXPECT_EQ(streamed, (std::vector<std::pair<int32_t, size_t>>{{4, 0}, {5, 1}, {1, 2}}));
}

TEST(SequenceDecoder, LengthLimitDiscardsTheRestOfTheRun) {
  k3::SequenceDecoder d = make(2, 100, {});
  k3::Sampler s(greedy());
  k3::Draft dr;
  dr.ids = {4, 5};
  const std::vector<std::vector<float>> r = {row_for(4), row_for(5), row_for(6)};
  std::vector<std::span<const float>> rows(r.begin(), r.end());
  const k3::DecodeStep st = d.step(s, rows, dr, 23, [](int32_t, size_t) { return true; });
  EXPECT_EQ(st.ids, (std::vector<int32_t>{4, 5, 6}));  // all accepted + the bonus id
  EXPECT_EQ(st.n_emitted, 2);
  EXPECT_EQ(st.accepted, 2);
  EXPECT_EQ(st.accepted_emitted, 2);
  EXPECT_EQ(d.end(), k3::DecodeEnd::MaxTokens);
  EXPECT_TRUE(st.needs_rollback());
}

TEST(SequenceDecoder, AcceptedStopIdEndsTheWindow) {
  k3::SequenceDecoder d = make(-1, 100, {5});
  k3::Sampler s(greedy());
  k3::Draft dr;
  dr.ids = {4, 5, 6};
  const std::vector<std::vector<float>> r = {row_for(4), row_for(5), row_for(6), row_for(7)};
  std::vector<std::span<const float>> rows(r.begin(), r.end());
  std::vector<int32_t> streamed;
  const k3::DecodeStep st = d.step(s, rows, dr, 24, [&](int32_t x, size_t) {
    streamed.push_back(x);
    return true;
  });
  EXPECT_EQ(st.ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(st.accepted, 2);  // the stop id was an accepted draft: no correction follows
  EXPECT_EQ(st.accepted_emitted, 2);
  EXPECT_EQ(d.end(), k3::DecodeEnd::StopId);
  EXPECT_EQ(streamed, (std::vector<int32_t>{4}));
  EXPECT_EQ(st.keep(), 2);
}

}  // namespace
