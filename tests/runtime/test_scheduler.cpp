// k3::Scheduler (continuous batching) on K3-mini: every request's ids equal generate() on the
// same request alone (greedy and seeded sampling, prompts longer than a prefill piece, more
// requests than slots), plus cancel, queue limits, forced output, logprobs, stop ids, shutdown.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "core/error.h"
#include "runtime/generator.h"
#include "runtime/loaded_model.h"
#include "runtime/scheduler.h"

namespace {

using namespace std::chrono_literals;

const k3::LoadedModel& mini() {
  static const k3::LoadedModel m = k3::LoadedModel::open(std::filesystem::path(K3_SOURCE_DIR) / "models" / "k3-mini");
  return m;
}

std::vector<int32_t> prompt_of(int n, int seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  const int64_t V = mini().tokenizer->vocab_size();
  for (int i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 7919 + seed * 104729 + 13) % (V - 600) + 256);
  return v;
}

struct Outcome {
  std::vector<int32_t> ids;
  k3::FinishReason finish = k3::FinishReason::Error;
  int32_t stop_id = -1;
  std::string error;
};

/// Drains a handle (bounded wait).
Outcome drain(k3::SeqHandle& h) {
  Outcome o;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto e = h.next(100ms);
    if (!e) continue;
    if (e->done) {
      o.finish = e->finish;
      o.stop_id = e->stop_id;
      o.error = e->error;
      return o;
    }
    o.ids.push_back(e->id);
  }
  ADD_FAILURE() << "sequence did not finish within 120 s";
  return o;
}

/// generate() alone: the ids it streams, and its final stop id (if any).
Outcome alone(const k3::SeqRequest& r, int64_t n_ctx) {
  const k3::Model& m = *mini().model;
  k3::SequenceState seq = m.new_sequence();
  k3::Sampler sampler(r.sampling);
  k3::GenerateOptions opt;
  opt.n_predict = r.max_tokens;
  opt.n_ctx = n_ctx;
  opt.n_vocab = r.n_vocab;
  opt.stop_ids = r.stop_ids;
  Outcome o;
  const auto res = k3::generate(m, seq, r.prompt, sampler, opt, [&](int32_t id) {
    o.ids.push_back(id);
    return true;
  });
  o.stop_id = res.stop_id;
  o.finish = res.stop == k3::StopReason::StopToken ? k3::FinishReason::Stop : k3::FinishReason::Length;
  return o;
}

k3::SeqRequest request(int n_prompt, int seed, int64_t max_tokens, float temp) {
  k3::SeqRequest r;
  r.prompt = prompt_of(n_prompt, seed);
  r.sampling.temp = temp;
  r.sampling.seed = static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ull;
  r.max_tokens = max_tokens;
  r.n_vocab = mini().tokenizer->vocab_size();
  r.stop_ids = mini().stop_ids();
  return r;
}

TEST(Scheduler, EveryRequestEqualsItsLoneRun) {
  const int64_t n_ctx = 1024;
  k3::Scheduler::Options so;
  so.n_parallel = 4;
  so.n_ctx = n_ctx;
  so.step_tokens = 300;  // long prompts take several steps next to running decodes
  k3::Scheduler sched(*mini().model, so);
  std::vector<k3::SeqRequest> reqs;
  const int prompt_lens[] = {5, 300, 1, 40, 600, 17, 2, 260, 90, 3};
  for (int i = 0; i < 10; ++i) reqs.push_back(request(prompt_lens[i], i + 1, 8 + 3 * i, i % 2 ? 0.8f : 0.0f));
  std::vector<std::shared_ptr<k3::SeqHandle>> hs;
  for (const auto& r : reqs) hs.push_back(sched.submit(r));
  size_t n_ids = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    const Outcome got = drain(*hs[i]);
    const Outcome want = alone(reqs[i], n_ctx);
    n_ids += want.ids.size();
    EXPECT_EQ(got.error, "");
    EXPECT_EQ(got.ids, want.ids);
    EXPECT_EQ(got.finish, want.finish);
    EXPECT_EQ(got.stop_id, want.stop_id);
  }
  std::printf("[scheduler] 10 requests, %zu sampled ids, all equal to their lone runs\n", n_ids);
  EXPECT_GT(n_ids, 50u);  // the comparison is not vacuous (not all stop at once)
  const auto st = sched.stats();
  EXPECT_EQ(st.running + st.waiting, 0);
  EXPECT_EQ(st.finished_total, 10u);
  EXPECT_GT(st.steps_total, 0u);
}

TEST(Scheduler, ContextLimitEndsWithLength) {
  k3::Scheduler::Options so;
  so.n_ctx = 12;
  k3::Scheduler sched(*mini().model, so);
  auto r = request(8, 3, 100, 0.0f);
  r.stop_ids.clear();
  const Outcome got = drain(*sched.submit(r));
  EXPECT_EQ(got.finish, k3::FinishReason::Length);
  EXPECT_EQ(got.ids, alone(r, 12).ids);
  EXPECT_EQ(got.ids.size(), 4u);  // 8 prompt + 3 fed + the pending one fill 12
}

TEST(Scheduler, ForcedOutputStopIdsAndLogprobs) {
  k3::Scheduler sched(*mini().model, {});
  auto r = request(6, 4, 10, 0.0f);
  const int32_t stop = r.stop_ids.at(0);
  r.forced_ids = {300, 301, 302, stop, 303};
  r.top_logprobs = 3;
  auto h = sched.submit(r);
  std::vector<k3::SeqEvent> evs;
  while (evs.empty() || !evs.back().done)
    if (auto e = h->next(10s)) evs.push_back(*e);
    else FAIL() << "no event";
  ASSERT_EQ(evs.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(evs[i].id, 300 + i);
    EXPECT_LE(evs[i].logprob, 0.0f);
    ASSERT_EQ(evs[i].top.size(), 3u);
    EXPECT_GE(evs[i].top[0].second, evs[i].top[1].second);
    EXPECT_GE(evs[i].top[1].second, evs[i].top[2].second);
    EXPECT_GE(evs[i].top[0].second, evs[i].logprob);  // the forced id is at most as likely as the top one
  }
  EXPECT_TRUE(evs[3].done);
  EXPECT_EQ(evs[3].finish, k3::FinishReason::Stop);
  EXPECT_EQ(evs[3].stop_id, stop);
  EXPECT_EQ(evs[3].n_generated, 4);
  EXPECT_EQ(evs[3].n_prompt, 6);
}

TEST(Scheduler, LogprobsAreTheLogSoftmaxOfTheLogits) {
  k3::Scheduler sched(*mini().model, {});
  auto r = request(9, 5, 1, 0.0f);
  r.top_logprobs = 2;
  auto h = sched.submit(r);
  auto e = h->next(30s);
  ASSERT_TRUE(e && !e->done);
  // Direct: the last-row logits of the prompt.
  k3::SequenceState s = mini().model->new_sequence();
  const auto l = mini().model->forward(s, r.prompt, false);
  const size_t nv = static_cast<size_t>(r.n_vocab);
  double mx = -INFINITY, sum = 0;
  for (size_t i = 0; i < nv; ++i) mx = std::max(mx, static_cast<double>(l[i]));
  for (size_t i = 0; i < nv; ++i) sum += std::exp(l[i] - mx);
  EXPECT_EQ(e->id, e->top[0].first);  // greedy picks the most likely id
  EXPECT_NEAR(e->logprob, l[static_cast<size_t>(e->id)] - mx - std::log(sum), 1e-5);
  EXPECT_FLOAT_EQ(e->logprob, e->top[0].second);
}

TEST(Scheduler, CancelFreesTheSlotAndQueueLimitRefuses) {
  k3::Scheduler::Options so;
  so.n_parallel = 1;
  so.max_queue = 1;
  so.n_ctx = 4096;
  k3::Scheduler sched(*mini().model, so);
  auto long_req = request(4, 6, 3000, 0.8f);
  long_req.stop_ids.clear();
  auto h1 = sched.submit(long_req);
  // Wait until it runs (so the single slot is taken), then fill the queue.
  ASSERT_TRUE(h1->next(30s).has_value());
  auto h2 = sched.submit(request(4, 7, 2, 0.0f));
  EXPECT_THROW(sched.submit(request(4, 8, 2, 0.0f)), k3::QueueFullError);
  h1->cancel();
  const Outcome o1 = drain(*h1);
  EXPECT_EQ(o1.finish, k3::FinishReason::Cancelled);
  const Outcome o2 = drain(*h2);  // admitted once the slot is free
  EXPECT_EQ(o2.error, "");
  EXPECT_EQ(o2.ids, alone(request(4, 7, 2, 0.0f), 4096).ids);
  for (int i = 0; i < 100 && sched.stats().running + sched.stats().waiting > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(sched.stats().running, 0);
  EXPECT_EQ(sched.stats().waiting, 0);
}

TEST(Scheduler, CancelWhileQueuedFreesTheQueuePlaceAtOnce) {
  k3::Scheduler::Options so;
  so.n_parallel = 1;
  so.max_queue = 1;
  k3::Scheduler sched(*mini().model, so);
  auto busy = request(4, 6, 1 << 20, 0.8f);
  busy.stop_ids.clear();
  auto h1 = sched.submit(busy);
  ASSERT_TRUE(h1->next(30s).has_value());          // running: the slot is taken
  auto h2 = sched.submit(request(4, 7, 2, 0.0f));  // waits
  EXPECT_THROW(sched.submit(request(4, 8, 2, 0.0f)), k3::QueueFullError);
  h2->cancel();                                    // its client left while it waited
  auto h3 = sched.submit(request(4, 8, 2, 0.0f));  // takes the freed place, no 429
  EXPECT_EQ(drain(*h2).finish, k3::FinishReason::Cancelled);
  h1->cancel();
  const Outcome o3 = drain(*h3);
  EXPECT_EQ(o3.error, "");
  EXPECT_EQ(o3.ids, alone(request(4, 8, 2, 0.0f), 4096).ids);
}

TEST(Scheduler, HugeMaxTokensIsBoundedByTheContext) {
  k3::Scheduler::Options so;
  so.n_ctx = 40;
  k3::Scheduler sched(*mini().model, so);
  auto r = request(8, 9, INT64_MAX, 0.0f);
  r.stop_ids.clear();
  const Outcome o = drain(*sched.submit(r));
  EXPECT_EQ(o.error, "");
  EXPECT_EQ(o.finish, k3::FinishReason::Length);
  EXPECT_EQ(o.ids.size(), 32u);  // 8 prompt + 31 fed + the pending one fill 40
}

TEST(Scheduler, BadRequestsAreRefusedAtSubmit) {
  k3::Scheduler::Options so;
  so.n_ctx = 16;
  k3::Scheduler sched(*mini().model, so);
  auto r = request(16, 1, 4, 0.0f);
  try {
    sched.submit(r);
    FAIL() << "expected k3::Error";
  } catch (const k3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("prompt is 16 tokens, the context is 16"), std::string::npos) << e.what();
  }
  r = request(4, 1, 0, 0.0f);
  EXPECT_THROW(sched.submit(r), k3::Error);
  r = request(4, 1, 4, 0.0f);
  r.sampling.top_p = 0.0f;
  EXPECT_THROW(sched.submit(r), k3::Error);
  r = request(4, 1, 4, 0.0f);
  r.prompt[2] = -1;
  EXPECT_THROW(sched.submit(r), k3::Error);
  r.prompt.clear();
  EXPECT_THROW(sched.submit(r), k3::Error);
  EXPECT_THROW(k3::Scheduler(*mini().model, k3::Scheduler::Options{0, 16, 1, 1}), k3::Error);
}

TEST(Scheduler, ShutdownFinishesOrCancels) {
  {
    k3::Scheduler sched(*mini().model, {});
    auto h = sched.submit(request(5, 2, 6, 0.0f));
    sched.shutdown(true);
    const Outcome o = drain(*h);
    EXPECT_EQ(o.ids, alone(request(5, 2, 6, 0.0f), 4096).ids);
    EXPECT_THROW(sched.submit(request(5, 2, 6, 0.0f)), k3::Error);
  }
  {
    k3::Scheduler sched(*mini().model, {});
    auto r = request(5, 2, 100000, 0.8f);
    r.stop_ids.clear();
    auto h = sched.submit(r);
    sched.shutdown(false);
    EXPECT_EQ(drain(*h).finish, k3::FinishReason::Cancelled);
  }
}

}  // namespace
