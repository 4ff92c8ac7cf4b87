// Speculative decoding inside the continuous-batching scheduler (k3 serve, issue 12): with
// several slots at once, some speculating (prompt lookup, or a draft model with its own state),
// some opted out, prefill pieces in the same forwards, greedy ids / finish reasons / stop ids /
// logprobs are identical to the same requests on a scheduler without speculation, for
// draft-max k in {1, 4, 8}; a stop id, max_tokens or the context reached inside an accepted run
// ends the sequence exactly there. On the tiny random checkpoint (fast under ASan).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/model_summary.h"
#include "runtime/draft_model.h"
#include "runtime/ngram_drafter.h"
#include "runtime/scheduler.h"
#include "runtime_test_util.h"

namespace {

using namespace std::chrono_literals;

struct Outcome {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;  ///< per streamed id (top_logprobs >= 0)
  k3::FinishReason finish = k3::FinishReason::Error;
  int32_t stop_id = -1;
  std::string error;
  int64_t n_generated = 0, n_drafted = 0, n_accepted = 0;
};

Outcome drain(k3::SeqHandle& h) {
  Outcome o;
  const auto deadline = std::chrono::steady_clock::now() + 300s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto e = h.next(100ms);
    if (!e) continue;
    if (e->done) {
      o.finish = e->finish;
      o.stop_id = e->stop_id;
      o.error = e->error;
      o.n_generated = e->n_generated;
      o.n_drafted = e->n_drafted;
      o.n_accepted = e->n_draft_accepted;
      return o;
    }
    o.ids.push_back(e->id);
    o.logprobs.push_back(e->logprob);
  }
  ADD_FAILURE() << "sequence did not finish within 300 s";
  return o;
}

/// A prompt of the tiny byte tokenizer's ids that repeats a phrase (prompt lookup finds matches).
std::vector<int32_t> repetitive_prompt(int n, int seed) {
  const std::string phrase = "the lamb and the lion " + std::to_string(seed) + " ";
  std::vector<int32_t> v;
  for (int i = 0; v.size() < static_cast<size_t>(n); ++i)
    v.push_back(static_cast<unsigned char>(phrase[i % phrase.size()]));
  return v;
}

k3::SeqRequest request(int n_prompt, int seed, int64_t max_tokens) {
  k3::SeqRequest r;
  r.prompt = repetitive_prompt(n_prompt, seed);
  r.sampling.temp = 0.0f;
  r.max_tokens = max_tokens;
  r.n_vocab = k3test::tiny().tokenizer->vocab_size();
  return r;
}

enum class Kind { None, Ngram, DraftSelf, DraftOther };

/// The tiny checkpoint with another seed: a poor draft (mostly rejected).
const k3::LoadedModel& tiny_other() {
  struct Holder {
    std::filesystem::path dir;
    k3::LoadedModel m;
    Holder() {
      char tmpl[] = "/tmp/k3specsched-XXXXXX";
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

k3::Scheduler::Options options(Kind kind, int64_t k, int64_t n_ctx = 512) {
  k3::Scheduler::Options so;
  so.n_parallel = 3;
  so.n_ctx = n_ctx;
  so.step_tokens = 24;  // long prompts take several steps next to running (speculating) decodes
  if (kind == Kind::None) return so;
  k3::Scheduler::Options::Speculation sp;
  sp.spec.draft_max = k;
  const int64_t nv = k3test::tiny().tokenizer->vocab_size();
  if (kind == Kind::Ngram) {
    sp.make_drafter = [](const k3::SeqRequest&) { return std::make_unique<k3::NgramDrafter>(3); };
  } else {
    const k3::Model* dm = kind == Kind::DraftSelf ? k3test::tiny().model.get() : tiny_other().model.get();
    sp.make_drafter = [dm, nv](const k3::SeqRequest& r) {
      return std::make_unique<k3::DraftModelDrafter>(*dm, r.sampling, nv);
    };
    sp.drafter_bytes = k3::DraftModelDrafter::max_bytes(dm->config(), n_ctx, k);
  }
  so.speculation = std::move(sp);
  return so;
}

struct RunResult {
  std::vector<Outcome> out;
  k3::SchedulerStats stats;
};

/// All requests submitted at once to a fresh scheduler, drained in order.
RunResult run(const k3::Scheduler::Options& so, const std::vector<k3::SeqRequest>& reqs) {
  k3::Scheduler sched(*k3test::tiny().model, so);
  std::vector<std::shared_ptr<k3::SeqHandle>> hs;
  for (const auto& r : reqs) hs.push_back(sched.submit(r));
  RunResult rr;
  for (auto& h : hs) rr.out.push_back(drain(*h));
  sched.shutdown(true);
  rr.stats = sched.stats();
  return rr;
}

std::vector<k3::SeqRequest> mixed_requests() {
  std::vector<k3::SeqRequest> reqs;
  const int lens[] = {60, 5, 130, 33, 1, 90};
  for (int i = 0; i < 6; ++i) {
    k3::SeqRequest r = request(lens[i], i, 20 + 7 * i);
    r.speculative = i != 3;  // one request opts out
    r.top_logprobs = i == 2 ? 2 : -1;
    reqs.push_back(std::move(r));
  }
  return reqs;
}

void expect_same(const RunResult& got, const RunResult& want) {
  ASSERT_EQ(got.out.size(), want.out.size());
  for (size_t i = 0; i < got.out.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(got.out[i].error, "");
    EXPECT_EQ(got.out[i].ids, want.out[i].ids);
    EXPECT_EQ(got.out[i].logprobs, want.out[i].logprobs);  // same rows: bit-identical log-probabilities
    EXPECT_EQ(got.out[i].finish, want.out[i].finish);
    EXPECT_EQ(got.out[i].stop_id, want.out[i].stop_id);
    EXPECT_EQ(got.out[i].n_generated, want.out[i].n_generated);
    EXPECT_LE(got.out[i].n_accepted, got.out[i].n_drafted);
  }
  EXPECT_EQ(got.stats.generated_tokens_total, want.stats.generated_tokens_total);
  EXPECT_EQ(got.stats.prompt_tokens_total, want.stats.prompt_tokens_total);
}

// Greedy: every drafter and k in {1, 4, 8} give the plain scheduler's ids, with 6 requests over
// 3 slots (prefill pieces in the speculating steps, one request opted out).
TEST(SpeculativeScheduler, GreedyIdsEqualPlainSchedulerForEveryDrafterAndK) {
  const std::vector<k3::SeqRequest> reqs = mixed_requests();
  const RunResult plain = run(options(Kind::None, 1), reqs);
  size_t n_ids = 0;
  for (const Outcome& o : plain.out) n_ids += o.ids.size();
  EXPECT_GT(n_ids, 60u);  // not vacuous
  EXPECT_EQ(plain.stats.spec_drafted_total, 0u);
  for (Kind kind : {Kind::Ngram, Kind::DraftSelf, Kind::DraftOther})
    for (int64_t k : {1, 4, 8}) {
      SCOPED_TRACE("drafter " + std::to_string(static_cast<int>(kind)) + ", k " + std::to_string(k));
      const RunResult spec = run(options(kind, k), reqs);
      expect_same(spec, plain);
      EXPECT_GT(spec.stats.spec_drafted_total, 0u);
      EXPECT_LE(spec.stats.spec_accepted_total, spec.stats.spec_drafted_total);
      EXPECT_EQ(spec.out[3].n_drafted, 0);  // the opted-out request never speculated
      if (kind == Kind::DraftSelf) {        // the target as its own draft: every draft is accepted
        EXPECT_EQ(spec.stats.spec_accepted_total, spec.stats.spec_drafted_total);
        EXPECT_LT(spec.stats.steps_total, plain.stats.steps_total);
      }
      // (The tiny random model's output rarely repeats itself, so prompt lookup's drafts are
      // mostly rejected here; tests/python/test_server_speculative.py sees them accepted on K3-mini.)
      uint64_t drafted = 0, accepted = 0;
      for (const Outcome& o : spec.out)
        drafted += static_cast<uint64_t>(o.n_drafted), accepted += static_cast<uint64_t>(o.n_accepted);
      EXPECT_EQ(drafted, spec.stats.spec_drafted_total);
      EXPECT_EQ(accepted, spec.stats.spec_accepted_total);
    }
}

// --draft-min: a step with fewer drafts than that is a plain decode step (every verify then
// checks exactly draft_max = draft_min ids here; near max_tokens the cap leaves fewer: none).
TEST(SpeculativeScheduler, DraftMinSkipsShortDrafts) {
  const std::vector<k3::SeqRequest> reqs = mixed_requests();
  const RunResult plain = run(options(Kind::None, 1), reqs);
  auto so = options(Kind::DraftSelf, 8);
  so.speculation->spec.draft_min = 8;
  const RunResult spec = run(so, reqs);
  expect_same(spec, plain);
  EXPECT_GT(spec.stats.spec_verifies_total, 0u);
  EXPECT_EQ(spec.stats.spec_drafted_total, 8 * spec.stats.spec_verifies_total);
}

// A stop id, max_tokens or the context reached inside an accepted run of 8 (the target as its
// own draft accepts every draft) ends the sequence exactly where plain decoding ends it.
TEST(SpeculativeScheduler, StopInsideAnAcceptedRunEndsThere) {
  const RunResult base = run(options(Kind::None, 1), {request(40, 7, 30)});
  const std::vector<int32_t>& ids = base.out[0].ids;
  ASSERT_EQ(ids.size(), 30u);
  // A stop id: the first id whose first occurrence is at position >= 3 (inside a run).
  int32_t stop = -1;
  for (size_t p = 3; p < ids.size() && stop < 0; ++p)
    if (std::find(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(p), ids[p]) ==
        ids.begin() + static_cast<std::ptrdiff_t>(p))
      stop = ids[p];
  ASSERT_GE(stop, 0) << "the tiny model's output has no new id after position 3";
  std::vector<k3::SeqRequest> reqs;
  reqs.push_back(request(40, 7, 30));
  reqs.back().stop_ids = {stop};
  reqs.push_back(request(40, 7, 6));  // max_tokens inside the first run of 8
  reqs.push_back(request(40, 7, 30));
  reqs.back().top_logprobs = 3;
  for (int64_t n_ctx : {int64_t{512}, int64_t{51}}) {  // 51: the context fills after 10 ids
    SCOPED_TRACE("n_ctx " + std::to_string(n_ctx));
    const RunResult plain = run(options(Kind::None, 1, n_ctx), reqs);
    if (n_ctx == 512) {
      EXPECT_EQ(plain.out[0].finish, k3::FinishReason::Stop);
      EXPECT_EQ(plain.out[0].stop_id, stop);
      EXPECT_EQ(plain.out[1].ids.size(), 6u);
    } else {
      EXPECT_EQ(plain.out[2].finish, k3::FinishReason::Length);
      EXPECT_LT(plain.out[2].ids.size(), 30u);
    }
    for (Kind kind : {Kind::DraftSelf, Kind::Ngram}) {
      SCOPED_TRACE("drafter " + std::to_string(static_cast<int>(kind)));
      const RunResult spec = run(options(kind, 8, n_ctx), reqs);
      expect_same(spec, plain);
      if (kind == Kind::DraftSelf) {
        EXPECT_GT(spec.out[0].n_accepted, 0);
      }
    }
  }
}

// With keep_slot_states, the state a speculating slot leaves behind holds exactly the ids a plain
// slot's does (cut back to the prompt's exact resume point: the generated ids, verified and
// rolled back or not, are not kept), so a follow-up request continues identically.
TEST(SpeculativeScheduler, KeptSlotStateMatchesPlain) {
  auto tokens_kept = [](k3::Scheduler::Options so) {
    so.keep_slot_states = true;
    so.n_parallel = 1;
    k3::Scheduler sched(*k3test::tiny().model, so);
    const Outcome first = drain(*sched.submit(request(100, 3, 17)));
    const auto summary = sched.slot_summary();
    k3::SeqRequest next = request(100, 3, 12);
    next.prompt.insert(next.prompt.end(), first.ids.begin(), first.ids.end());
    next.prompt.push_back('x');
    const Outcome second = drain(*sched.submit(next));
    return std::make_pair(summary[0].second, second.ids);
  };
  const auto plain = tokens_kept(options(Kind::None, 1));
  EXPECT_EQ(plain.first, 64);  // the last multiple of 64 that leaves >= 2 of the 100 prompt ids
  for (Kind kind : {Kind::Ngram, Kind::DraftSelf}) {
    SCOPED_TRACE("drafter " + std::to_string(static_cast<int>(kind)));
    EXPECT_EQ(tokens_kept(options(kind, 4)), plain);
  }
}

// Seeded sampling at temperature 0.9 runs to max_tokens and replays identically (the
// distribution itself is tested on accept_drafts in test_speculative.cpp).
TEST(SpeculativeScheduler, SeededSamplingIsDeterministic) {
  std::vector<k3::SeqRequest> reqs = mixed_requests();
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].sampling.temp = 0.9f;
    reqs[i].sampling.seed = 1000 + i;
  }
  for (Kind kind : {Kind::Ngram, Kind::DraftOther}) {
    const RunResult a = run(options(kind, 4), reqs), b = run(options(kind, 4), reqs);
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(a.out[i].error, "");
      EXPECT_EQ(a.out[i].ids, b.out[i].ids);
      EXPECT_TRUE(a.out[i].finish == k3::FinishReason::Stop ||
                  static_cast<int64_t>(a.out[i].ids.size()) == reqs[i].max_tokens);
    }
  }
}

// Memory: a speculating slot reports its verify records (n_kda_layers x (k + 1) x (S + conv))
// and its drafter's state; bad speculation options are named errors.
TEST(SpeculativeScheduler, SlotBytesAndBadOptions) {
  const k3::Model& m = *k3test::tiny().model;
  const k3::StateBytes sb = k3::state_bytes(m.config());
  const uint64_t plain = k3::Scheduler(m, options(Kind::None, 1)).slot_bytes();
  EXPECT_EQ(plain, sb.total(512));
  EXPECT_EQ(k3::Scheduler(m, options(Kind::Ngram, 4)).slot_bytes(), plain + 5 * sb.kda_total);
  EXPECT_EQ(k3::Scheduler(m, options(Kind::DraftSelf, 4)).slot_bytes(),
            plain + 5 * sb.kda_total + sb.total(512) + 4 * sb.kda_total);
  auto bad = options(Kind::Ngram, 4);
  bad.speculation->spec.draft_min = 5;
  try {
    k3::Scheduler s(m, bad);
    ADD_FAILURE() << "no error";
  } catch (const k3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--draft-min"), std::string::npos) << e.what();
  }
  bad = options(Kind::Ngram, 4);
  bad.speculation->make_drafter = nullptr;
  EXPECT_THROW(k3::Scheduler(m, bad), k3::Error);
}

}  // namespace
