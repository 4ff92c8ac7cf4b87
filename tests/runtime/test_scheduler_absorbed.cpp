// Errors the scheduler absorbs and goes on from are a line to Scheduler::Options::log and a
// count in SchedulerStats::absorbed_errors_total: a drafter that throws on every proposal makes
// its sequence decode without drafts (the same ids as a scheduler without speculation), once.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/scheduler.h"
#include "runtime_test_util.h"

namespace {

using namespace std::chrono_literals;

class ThrowingDrafter : public k3::Drafter {
 public:
  k3::Draft propose(std::span<const int32_t>, int64_t) override { throw std::runtime_error("draft state lost"); }
  std::string name() const override { return "throwing"; }
};

std::vector<int32_t> run(k3::Scheduler& sched, k3::SeqRequest req, k3::FinishReason* finish) {
  auto h = sched.submit(std::move(req));
  std::vector<int32_t> ids;
  const auto deadline = std::chrono::steady_clock::now() + 300s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto e = h->next(100ms);
    if (!e) continue;
    if (e->done) {
      *finish = e->finish;
      return ids;
    }
    ids.push_back(e->id);
  }
  ADD_FAILURE() << "sequence did not finish within 300 s";
  return ids;
}

TEST(SchedulerAbsorbed, AFailingDrafterIsLoggedCountedAndDecodingGoesOn) {
  const k3::Model& m = *k3test::tiny().model;
  k3::SeqRequest req;
  for (int i = 0; i < 40; ++i) req.prompt.push_back(static_cast<int32_t>('a' + i % 7));
  req.sampling.temp = 0.0f;
  req.max_tokens = 12;
  req.n_vocab = k3test::tiny().tokenizer->vocab_size();

  k3::Scheduler::Options plain_opt;
  plain_opt.n_parallel = 1;
  plain_opt.n_ctx = 256;
  k3::FinishReason plain_finish = k3::FinishReason::Error;
  std::vector<int32_t> want;
  {
    k3::Scheduler plain(m, plain_opt);
    want = run(plain, req, &plain_finish);
    EXPECT_EQ(plain.stats().absorbed_errors_total, 0u);
  }

  std::mutex mu;
  std::vector<std::string> lines;
  k3::Scheduler::Options so = plain_opt;
  so.log = [&](const std::string& l) {
    std::lock_guard<std::mutex> lk(mu);
    lines.push_back(l);
  };
  k3::Scheduler::Options::Speculation sp;
  sp.spec.draft_max = 4;
  sp.make_drafter = [](const k3::SeqRequest&) { return std::make_unique<ThrowingDrafter>(); };
  so.speculation = sp;
  k3::Scheduler sched(m, so);
  k3::FinishReason finish = k3::FinishReason::Error;
  EXPECT_EQ(run(sched, req, &finish), want);
  EXPECT_EQ(finish, plain_finish);
  EXPECT_EQ(sched.stats().absorbed_errors_total, 1u);  // the drafter is dropped after its first failure
  std::lock_guard<std::mutex> lk(mu);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("drafter failed"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("draft state lost"), std::string::npos) << lines[0];
}

}  // namespace
