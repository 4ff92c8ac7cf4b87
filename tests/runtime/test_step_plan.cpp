// runtime/step_plan.h: the plan rank 0 broadcasts before each engine step of `k3 serve` under N
// ranks survives encode/decode field for field; bytes it did not write are refused by name.
#include <gtest/gtest.h>

#include <vector>

#include "core/comm.h"
#include "core/error.h"
#include "runtime/step_plan.h"

namespace {

k3::StepPlan sample_plan() {
  k3::StepPlan p;
  k3::SeqRequest a;
  a.prompt = {1, 2, 3, 70000};
  a.sampling.temp = 0.7f;
  a.sampling.top_k = 13;
  a.sampling.top_p = 0.9f;
  a.sampling.min_p = 0.01f;
  a.sampling.repeat_penalty = 1.1f;
  a.sampling.frequency_penalty = -0.5f;
  a.sampling.presence_penalty = 0.25f;
  a.sampling.repeat_last_n = -1;
  a.sampling.seed = 0xfedcba9876543210ull;
  a.max_tokens = 77;
  a.stop_ids = {5, 6};
  a.n_vocab = 8000;
  a.top_logprobs = 3;
  a.forced_ids = {9};
  a.speculative = false;
  a.cache_partition = 42;
  a.sampling.logit_bias = {{7, -100.f}, {70000, 2.5f}};
  a.constraint_spec.kind = k3::ConstraintSpec::Kind::ToolCall;
  a.constraint_spec.text = "root ::= \"a\"";
  a.constraint_spec.tools = {{"get_weather", R"({"type":"object"})"}, {"add", ""}};
  a.constraint_spec.strict = false;
  a.constraint_spec.after_think = true;
  p.admit.push_back(a);
  p.admit.push_back(k3::SeqRequest{});
  p.cancel = {0, 3};
  p.slot_ops.push_back({k3::StepPlan::SlotOp::Restore, 1, "/tmp/slots/a.bin", "fp"});
  return p;
}

TEST(StepPlan, RoundTripsEveryField) {
  const k3::StepPlan p = sample_plan();
  const k3::StepPlan q = k3::decode_plan(k3::encode_plan(p));
  ASSERT_EQ(q.admit.size(), 2u);
  const k3::SeqRequest& a = p.admit[0];
  const k3::SeqRequest& b = q.admit[0];
  EXPECT_EQ(b.prompt, a.prompt);
  EXPECT_EQ(b.sampling.temp, a.sampling.temp);
  EXPECT_EQ(b.sampling.top_k, a.sampling.top_k);
  EXPECT_EQ(b.sampling.top_p, a.sampling.top_p);
  EXPECT_EQ(b.sampling.min_p, a.sampling.min_p);
  EXPECT_EQ(b.sampling.repeat_penalty, a.sampling.repeat_penalty);
  EXPECT_EQ(b.sampling.frequency_penalty, a.sampling.frequency_penalty);
  EXPECT_EQ(b.sampling.presence_penalty, a.sampling.presence_penalty);
  EXPECT_EQ(b.sampling.repeat_last_n, a.sampling.repeat_last_n);
  EXPECT_EQ(b.sampling.seed, a.sampling.seed);
  EXPECT_EQ(b.max_tokens, a.max_tokens);
  EXPECT_EQ(b.stop_ids, a.stop_ids);
  EXPECT_EQ(b.n_vocab, a.n_vocab);
  EXPECT_EQ(b.top_logprobs, a.top_logprobs);
  EXPECT_EQ(b.forced_ids, a.forced_ids);
  EXPECT_EQ(b.speculative, a.speculative);
  EXPECT_EQ(b.cache_partition, a.cache_partition);
  EXPECT_EQ(b.sampling.logit_bias, a.sampling.logit_bias);
  EXPECT_EQ(b.constraint_spec.kind, a.constraint_spec.kind);
  EXPECT_EQ(b.constraint_spec.text, a.constraint_spec.text);
  ASSERT_EQ(b.constraint_spec.tools.size(), 2u);
  EXPECT_EQ(b.constraint_spec.tools[0].name, "get_weather");
  EXPECT_EQ(b.constraint_spec.tools[0].parameters, R"({"type":"object"})");
  EXPECT_EQ(b.constraint_spec.tools[1].name, "add");
  EXPECT_EQ(b.constraint_spec.tools[1].parameters, "");
  EXPECT_EQ(b.constraint_spec.strict, a.constraint_spec.strict);
  EXPECT_EQ(b.constraint_spec.after_think, a.constraint_spec.after_think);
  EXPECT_TRUE(b.constraint == nullptr) << "the compiled form does not travel";
  EXPECT_TRUE(q.admit[1].constraint_spec.empty());
  EXPECT_TRUE(q.admit[1].sampling.logit_bias.empty());
  EXPECT_TRUE(q.admit[1].prompt.empty());
  EXPECT_TRUE(q.admit[1].speculative);
  EXPECT_EQ(q.cancel, p.cancel);
  ASSERT_EQ(q.slot_ops.size(), 1u);
  EXPECT_EQ(q.slot_ops[0].kind, k3::StepPlan::SlotOp::Restore);
  EXPECT_EQ(q.slot_ops[0].id, 1);
  EXPECT_EQ(q.slot_ops[0].file, "/tmp/slots/a.bin");
  EXPECT_EQ(q.slot_ops[0].fingerprint, "fp");
  EXPECT_FALSE(q.stop);
  k3::StepPlan stop;
  stop.stop = true;
  EXPECT_TRUE(k3::decode_plan(k3::encode_plan(stop)).stop);
}

TEST(StepPlan, RefusesTruncatedOrTrailingBytes) {
  const std::vector<uint8_t> bytes = k3::encode_plan(sample_plan());
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(k3::decode_plan(cut), k3::Error) << n;
  }
  std::vector<uint8_t> more = bytes;
  more.push_back(0);
  EXPECT_THROW(k3::decode_plan(more), k3::Error);
  std::vector<uint8_t> bad_stop = bytes;
  bad_stop[0] = 7;
  EXPECT_THROW(k3::decode_plan(bad_stop), k3::Error);
}

TEST(StepPlan, BroadcastInOneProcessKeepsThePlan) {
  k3::SingleProcessComm one;
  k3::StepPlan p = sample_plan();
  k3::broadcast_plan(one, p);
  EXPECT_EQ(p.admit.size(), 2u);
  EXPECT_EQ(p.cancel, (std::vector<int64_t>{0, 3}));
}

}  // namespace
