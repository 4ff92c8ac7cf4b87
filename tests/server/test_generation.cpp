// drive_generation's client-gone handling and the heartbeat writer of non-streaming answers:
// a client that hangs up while tokens keep flowing is noticed through alive() (a non-streaming
// answer writes nothing but heartbeats until the end), and the sequence is cancelled.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "generation.h"
#include "metrics.h"
#include "serve_context.h"
#include "sse_writer.h"

namespace {

using namespace std::chrono_literals;

// Every id decodes to the content "t".
class OneCharDecoder : public k3::server::OutputDecoder {
 public:
  k3::server::StreamDelta push(int32_t) override {
    k3::server::StreamDelta d;
    d.content = "t";
    return d;
  }
  k3::server::StreamDelta finish() override { return {}; }
};

// A handle whose events are all already there: drive_generation never waits for one.
std::shared_ptr<k3::SeqHandle> handle_with(int n_ids) {
  auto h = std::make_shared<k3::SeqHandle>(std::chrono::steady_clock::now());
  for (int i = 0; i < n_ids; ++i) {
    k3::SeqEvent e;
    e.id = 1;
    e.time = std::chrono::steady_clock::now();
    h->push(e);
  }
  k3::SeqEvent d;
  d.done = true;
  d.finish = k3::FinishReason::Length;
  d.n_prompt = 3;
  d.n_generated = n_ids;
  d.time = std::chrono::steady_clock::now();
  h->push(d);
  return h;
}

struct Fixture {
  k3::server::Metrics metrics;
  k3::server::ServeContext ctx;
  Fixture() { ctx.metrics = &metrics; }
};

TEST(DriveGeneration, AliveIsPolledWhileTokensFlow) {
  Fixture f;
  auto h = handle_with(50);
  OneCharDecoder dec;
  k3::server::StopMatcher stops(std::vector<std::string>{});
  int emitted = 0, polls = 0;
  const auto r = k3::server::drive_generation(
      f.ctx, *h, dec, stops, false,
      [&](const k3::server::StreamDelta&, const std::vector<k3::server::TokenLogprob>&) {
        ++emitted;
        return true;  // a non-streaming answer only collects
      },
      [&] { return ++polls < 3; });  // the client hangs up after the second token
  EXPECT_TRUE(r.client_gone);
  EXPECT_TRUE(h->cancelled());
  EXPECT_EQ(emitted, 3);
  EXPECT_EQ(polls, 3);
}

TEST(DriveGeneration, RunsToTheEndWhileTheClientStays) {
  Fixture f;
  auto h = handle_with(5);
  OneCharDecoder dec;
  k3::server::StopMatcher stops(std::vector<std::string>{});
  std::string text;
  const auto r = k3::server::drive_generation(
      f.ctx, *h, dec, stops, false,
      [&](const k3::server::StreamDelta& d, const std::vector<k3::server::TokenLogprob>&) {
        text += d.content;
        return true;
      },
      [] { return true; });
  EXPECT_FALSE(r.client_gone);
  EXPECT_FALSE(h->cancelled());
  EXPECT_EQ(text, "ttttt");
  EXPECT_EQ(r.finish, k3::FinishReason::Length);
  EXPECT_EQ(k3::server::finish_reason_of(r, false), "length");
  EXPECT_EQ(r.n_generated, 5);
}

TEST(HeartbeatWriter, JsonHeartbeatIsWhitespaceAndAFailedWriteMeansGone) {
  httplib::DataSink sink;
  std::string body;
  bool open = true;
  sink.write = [&](const char* d, size_t n) {
    if (!open) return false;
    body.append(d, n);
    return true;
  };
  sink.is_writable = [&] { return open; };
  sink.done = [] {};
  k3::server::SseWriter out(sink, 0ms, k3::server::kJsonHeartbeat);
  EXPECT_TRUE(out.alive());
  EXPECT_TRUE(out.alive());
  EXPECT_TRUE(out.write("{\"a\":1}"));
  EXPECT_EQ(body, "\n\n{\"a\":1}");
  EXPECT_EQ(nlohmann::json::parse(body)["a"], 1);  // leading whitespace is legal JSON
  open = false;
  EXPECT_FALSE(out.alive());

  k3::server::SseWriter sse(sink, 0ms);
  open = true;
  body.clear();
  EXPECT_TRUE(sse.alive());
  EXPECT_EQ(body, ": keep-alive\n\n");
}

}  // namespace
