// Prometheus text of k3::server::Metrics: names, labels, cumulative histogram buckets.
#include <gtest/gtest.h>

#include "metrics.h"

namespace {

TEST(Metrics, RendersGaugesCountersAndCumulativeHistograms) {
  k3::server::Metrics m;
  m.count_request("/v1/completions", 200);
  m.count_request("/v1/completions", 200);
  m.count_request("/v1/completions", 429);
  m.count_finish("stop");
  m.observe_ttft(0.003);
  m.observe_ttft(0.5);
  m.observe_ttft(1000);
  k3::SchedulerStats s;
  s.running = 2;
  s.waiting = 3;
  s.prompt_tokens_total = 10;
  s.generated_tokens_total = 7;
  const std::string t = m.render(s, "k3-mini");
  auto has = [&](const std::string& line) { return t.find(line + "\n") != std::string::npos; };
  EXPECT_TRUE(has("k3:num_requests_running{model_name=\"k3-mini\"} 2")) << t;
  EXPECT_TRUE(has("k3:num_requests_waiting{model_name=\"k3-mini\"} 3"));
  EXPECT_TRUE(has("k3:prompt_tokens_total{model_name=\"k3-mini\"} 10"));
  EXPECT_TRUE(has("k3:generation_tokens_total{model_name=\"k3-mini\"} 7"));
  EXPECT_TRUE(has("k3:requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2"));
  EXPECT_TRUE(has("k3:requests_total{endpoint=\"/v1/completions\",status=\"429\"} 1"));
  EXPECT_TRUE(has("k3:request_success_total{model_name=\"k3-mini\",finished_reason=\"stop\"} 1"));
  EXPECT_TRUE(has("k3:time_to_first_token_seconds_bucket{le=\"0.001\"} 0"));
  EXPECT_TRUE(has("k3:time_to_first_token_seconds_bucket{le=\"0.005\"} 1"));
  EXPECT_TRUE(has("k3:time_to_first_token_seconds_bucket{le=\"0.5\"} 2"));
  EXPECT_TRUE(has("k3:time_to_first_token_seconds_bucket{le=\"80\"} 2"));
  EXPECT_TRUE(has("k3:time_to_first_token_seconds_bucket{le=\"+Inf\"} 3"));
  EXPECT_TRUE(has("k3:time_to_first_token_seconds_count 3"));
  EXPECT_TRUE(has("# TYPE k3:inter_token_latency_seconds histogram"));
}

TEST(Metrics, RendersTheEngineAbsorbedErrorCounter) {
  k3::server::Metrics m;
  k3::SchedulerStats s;
  s.absorbed_errors_total = 4;
  const std::string t = m.render(s, "k3-mini");
  EXPECT_NE(t.find("# TYPE k3:engine_absorbed_errors_total counter\n"), std::string::npos) << t;
  EXPECT_NE(t.find("k3:engine_absorbed_errors_total{model_name=\"k3-mini\"} 4\n"), std::string::npos) << t;
}

}  // namespace
