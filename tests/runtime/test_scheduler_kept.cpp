// k3::Scheduler's kept slot states (Options::keep_slot_states, `k3 serve --slot-save-path`) on
// K3-mini: a request whose prompt extends a slot's kept ids (a multi-turn conversation: the
// previous prompt, its output, new ids) gives the same ids and bit-identical logprobs (the
// log-softmax of its logits rows) as the same request run alone, for prefill chunks on and off
// the 64-grid, greedy and seeded sampling; a slot saved to a file and restored in another
// scheduler continues exactly too; a state file without the slot's exact-resume mark (a
// `k3 run` state, whose last ids were fed in decode form) is refused naming the file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <span>
#include <stdexcept>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/loaded_model.h"
#include "runtime/scheduler.h"

namespace {

using namespace std::chrono_literals;

const k3::LoadedModel& mini() {
  static const k3::LoadedModel m = k3::LoadedModel::open(std::filesystem::path(K3_SOURCE_DIR) / "models" / "k3-mini");
  return m;
}

/// K3-mini with another prefill chunk (0: the default model, as `k3 serve` binds it).
const k3::Model& model_chunk(int64_t chunk) {
  if (chunk == 0) return *mini().model;
  static std::map<int64_t, std::unique_ptr<k3::Model>> models;
  auto& m = models[chunk];
  if (!m) {
    k3::ModelOptions o = mini().model->options();
    o.prefill_chunk = chunk;
    m = std::make_unique<k3::Model>(*mini().checkpoint, o);
  }
  return *m;
}

std::vector<int32_t> ids_of(int n, int seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  const int64_t V = mini().tokenizer->vocab_size();
  for (int i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 7919 + seed * 104729 + 13) % (V - 600) + 256);
  return v;
}

/// Every event of one sequence: ids, logprobs and top alternatives, and how it ended.
struct SeqRun {
  std::vector<int32_t> ids;
  std::vector<float> logprob;
  std::vector<std::vector<std::pair<int32_t, float>>> top;
  k3::FinishReason finish = k3::FinishReason::Error;
  std::string error;
};

SeqRun drain(k3::SeqHandle& h) {
  SeqRun r;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto e = h.next(100ms);
    if (!e) continue;
    if (e->done) {
      r.finish = e->finish;
      r.error = e->error;
      if (e->finish == k3::FinishReason::Stop) {  // the stop id's logprobs travel on the done event
        r.logprob.push_back(e->logprob);
        r.top.push_back(e->top);
      }
      return r;
    }
    r.ids.push_back(e->id);
    r.logprob.push_back(e->logprob);
    r.top.push_back(e->top);
  }
  ADD_FAILURE() << "sequence did not finish within 120 s";
  return r;
}

k3::SeqRequest request(std::vector<int32_t> prompt, int seed, float temp, int64_t max_tokens) {
  k3::SeqRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temp = temp;
  r.sampling.seed = static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ull + 1;
  r.max_tokens = max_tokens;
  r.n_vocab = mini().tokenizer->vocab_size();
  r.stop_ids = mini().stop_ids();
  r.top_logprobs = 5;
  return r;
}

/// "" when both runs emitted the same ids with bit-identical logprobs, else the first difference.
std::string run_diff(const SeqRun& a, const SeqRun& b) {
  if (a.error != b.error) return "error '" + a.error + "' vs '" + b.error + "'";
  if (a.finish != b.finish)
    return std::string("finish ") + k3::finish_reason_name(a.finish) + " vs " + k3::finish_reason_name(b.finish);
  if (a.ids != b.ids) return "ids differ";
  if (a.logprob.size() != b.logprob.size()) return "logprob count";
  for (size_t i = 0; i < a.logprob.size(); ++i) {
    if (std::memcmp(&a.logprob[i], &b.logprob[i], sizeof(float)) != 0)
      return "logprob of event " + std::to_string(i) + ": " + std::to_string(a.logprob[i]) + " vs " +
             std::to_string(b.logprob[i]);
    if (a.top[i].size() != b.top[i].size()) return "top size of event " + std::to_string(i);
    for (size_t j = 0; j < a.top[i].size(); ++j)
      if (a.top[i][j].first != b.top[i][j].first ||
          std::memcmp(&a.top[i][j].second, &b.top[i][j].second, sizeof(float)) != 0)
        return "top " + std::to_string(j) + " of event " + std::to_string(i);
  }
  return "";
}

k3::Scheduler::Options options(bool keep) {
  k3::Scheduler::Options so;
  so.n_parallel = keep ? 2 : 1;
  so.n_ctx = 2048;
  so.keep_slot_states = keep;
  return so;
}

/// Conversations of 3 turns (prompt_{t+1} = prompt_t + output_t + new ids) through a scheduler
/// keeping slot states, each turn compared with the same request on a scheduler without them.
void conversations_equal_lone_runs(int64_t chunk) {
  const k3::Model& m = model_chunk(chunk);
  k3::Scheduler kept(m, options(true));
  k3::Scheduler lone(m, options(false));
  const int first_lens[] = {5, 63, 64, 65, 127, 128, 129, 191, 200, 255, 256, 257, 300};
  const int new_lens[] = {1, 2, 3, 17, 64, 70, 129};
  int n_requests = 0, n_events = 0, round = 0;
  for (int c = 0; c < 13; ++c) {
    const float temp = c % 2 ? 0.9f : 0.0f;
    std::vector<int32_t> prompt = ids_of(first_lens[c], 100 + c);
    for (int turn = 0; turn < 3; ++turn, ++round) {
      SCOPED_TRACE("chunk " + std::to_string(m.options().prefill_chunk) + " conversation " + std::to_string(c) +
                   " turn " + std::to_string(turn) + " prompt " + std::to_string(prompt.size()));
      const k3::SeqRequest r = request(prompt, 1000 * c + turn, temp, 6 + (round % 7));
      const SeqRun got = drain(*kept.submit(r));
      const SeqRun want = drain(*lone.submit(r));
      EXPECT_EQ(got.error, "");
      EXPECT_EQ(run_diff(got, want), "");
      ++n_requests;
      n_events += static_cast<int>(want.logprob.size());
      prompt.insert(prompt.end(), want.ids.begin(), want.ids.end());
      const std::vector<int32_t> more = ids_of(new_lens[round % 7], 7 * round + 3);
      prompt.insert(prompt.end(), more.begin(), more.end());
    }
  }
  const k3::SchedulerStats st = kept.stats();
  std::printf(
      "[kept slots] chunk %lld: %d requests, %d events with logprobs, all equal to lone runs; %llu of "
      "%llu prompt ids resumed from kept states\n",
      static_cast<long long>(m.options().prefill_chunk), n_requests, n_events,
      static_cast<unsigned long long>(st.prompt_tokens_reused),
      static_cast<unsigned long long>(st.prompt_tokens_reused + st.prompt_tokens_total));
  EXPECT_GT(st.prompt_tokens_reused, 1000u);  // the kept path was taken (not a vacuous comparison)
  EXPECT_EQ(lone.stats().prompt_tokens_reused, 0u);
}

TEST(SchedulerKeptSlots, ExtendingRequestEqualsItsLoneRunBitwise) { conversations_equal_lone_runs(0); }

TEST(SchedulerKeptSlots, ExtendingRequestEqualsItsLoneRunBitwiseOffTheChunkGrid) {
  conversations_equal_lone_runs(128);  // kept points at 64-multiples between the 128-grid points
}

TEST(SchedulerKeptSlots, KeptStateIsCutAtTheExactResumePoint) {
  k3::Scheduler kept(*mini().model, options(true));
  for (const auto& [n, want] : std::vector<std::pair<int, int64_t>>{
           {300, 256}, {256, 256}, {257, 256}, {130, 128}, {129, 64}, {65, 0}, {5, 0}}) {
    SCOPED_TRACE("prompt " + std::to_string(n));
    ASSERT_EQ(drain(*kept.submit(request(ids_of(n, n), 1, 0.0f, 4))).error, "");
    const auto slots = kept.slot_summary();
    EXPECT_EQ(slots[0].second, want);  // the one request ran in slot 0 (free, or extended by none)
    kept.erase_slot(0);
  }
}

/// A slot holds its last sequence's state or nothing: a later sequence that keeps nothing (too
/// short to reach an exact resume point) leaves the slot empty, not holding the earlier state.
TEST(SchedulerKeptSlots, LaterSequenceThatKeepsNothingEmptiesTheSlot) {
  k3::Scheduler::Options so = options(true);
  so.n_parallel = 1;  // every request runs in slot 0
  k3::Scheduler kept(*mini().model, so);
  ASSERT_EQ(drain(*kept.submit(request(ids_of(300, 41), 1, 0.0f, 4))).error, "");
  EXPECT_EQ(kept.slot_summary()[0].second, 256);
  ASSERT_EQ(drain(*kept.submit(request(ids_of(5, 42), 1, 0.0f, 4))).error, "");
  EXPECT_EQ(kept.slot_summary()[0].second, 0);
}

std::filesystem::path temp_dir() {
  char tmpl[] = "/tmp/k3kept-XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

/// A slot file records the prefill grain its cut point is exact for: a server with another grain
/// (a prefill chunk off the 64-grid) refuses it rather than continue inexactly.
TEST(SchedulerKeptSlots, SlotFileOfAnotherPrefillGrainIsRefused) {
  const std::filesystem::path dir = temp_dir();
  const std::filesystem::path file = dir / "slot.bin";
  {
    k3::Scheduler a(*mini().model, options(true));
    ASSERT_EQ(drain(*a.submit(request(ids_of(200, 7), 1, 0.0f, 4))).error, "");
    EXPECT_EQ(a.save_slot(0, file, "fp").n_tokens, 192);
  }
  // Grain 96: 192 is one of its multiples, but the state was cut for the 64-grain.
  k3::Scheduler b(model_chunk(96), options(true));
  try {
    b.restore_slot(0, file, "fp");
    ADD_FAILURE() << "a slot file of another prefill grain was restored";
  } catch (const k3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("prefill grain of 96"), std::string::npos) << e.what();
  }
  k3::Scheduler c(*mini().model, options(true));  // the same grain restores it
  EXPECT_EQ(c.restore_slot(0, file, "fp").n_tokens, 192);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST(SchedulerKeptSlots, RestoredSlotContinuesExactlyAndDecodeFormStatesAreRefused) {
  const std::filesystem::path dir = temp_dir();
  const std::string fp = "test-fingerprint";
  k3::Scheduler lone(*mini().model, options(false));
  int n_rounds = 0;
  for (int c = 0; c < 4; ++c) {
    SCOPED_TRACE("round " + std::to_string(c));
    const float temp = c % 2 ? 0.9f : 0.0f;
    const std::vector<int32_t> p1 = ids_of(150 + 61 * c, 500 + c);
    const std::filesystem::path file = dir / ("slot" + std::to_string(c) + ".bin");
    int64_t saved = 0;
    std::vector<int32_t> p2 = p1;
    {
      k3::Scheduler a(*mini().model, options(true));
      const SeqRun first = drain(*a.submit(request(p1, c, temp, 8)));
      ASSERT_EQ(first.error, "");
      saved = a.save_slot(0, file, fp).n_tokens;
      EXPECT_GT(saved, 0);
      EXPECT_EQ(saved % 64, 0);
      p2.insert(p2.end(), first.ids.begin(), first.ids.end());
      const std::vector<int32_t> more = ids_of(5 + 9 * c, 900 + c);
      p2.insert(p2.end(), more.begin(), more.end());
    }
    k3::Scheduler b(*mini().model, options(true));
    EXPECT_EQ(b.restore_slot(1, file, fp).n_tokens, saved);
    const k3::SeqRequest r = request(p2, 77 + c, temp, 10);
    const SeqRun got = drain(*b.submit(r));
    const SeqRun want = drain(*lone.submit(r));
    EXPECT_EQ(run_diff(got, want), "");
    EXPECT_EQ(b.stats().prompt_tokens_reused, static_cast<uint64_t>(saved));  // resumed from the restored state
    ++n_rounds;
  }
  EXPECT_EQ(n_rounds, 4);
  // A `k3 run`-style state (prompt prefilled, then generated ids fed in decode form) carries no
  // exact-resume mark: refused, naming the file and the reason.
  {
    const k3::Model& m = *mini().model;
    k3::SequenceState s = m.new_sequence();
    std::vector<int32_t> ids = ids_of(128, 3);
    m.forward(s, ids, false);
    for (int32_t id : {300, 301, 302}) {
      m.forward(s, std::span<const int32_t>(&id, 1), false);
      ids.push_back(id);
    }
    k3::SequenceFileMeta meta;
    meta.fingerprint = fp;
    meta.ids = ids;
    meta.extra_json = "{\"pending\": 303}";
    s.save(dir / "run.bin", meta);
    k3::Scheduler b(*mini().model, options(true));
    try {
      b.restore_slot(0, dir / "run.bin", fp);
      ADD_FAILURE() << "a decode-form state was restored";
    } catch (const k3::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("run.bin"), std::string::npos) << msg;
      EXPECT_NE(msg.find("exact resume point"), std::string::npos) << msg;
    }
    EXPECT_EQ(b.slot_summary()[0].second, 0);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
