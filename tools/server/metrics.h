// Prometheus text exposition for GET /metrics: vLLM's metric suffixes under the `k3:` prefix
// (spec serving.md "Metrics people scrape"), so dashboards carry over. Counters of requests by
// endpoint and status and by finish reason, latency histograms (seconds) fed by the endpoints
// from SeqEvent timestamps, and the scheduler's gauges and token counters.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/prefix_cache.h"
#include "runtime/scheduler.h"

namespace k3::server {

/// A cumulative histogram with fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  /// Appends `name_bucket{le=...}`, `name_sum`, `name_count` lines.
  void render(std::string& out, const std::string& name) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  ///< [bounds.size() + 1], the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

/// Thread-safe metric registry of one server.
class Metrics {
 public:
  Metrics();
  /// One finished HTTP request (endpoint = the route path, or "other").
  void count_request(const std::string& endpoint, int status);
  /// One finished generation, by finish_reason ("stop", "length", "tool_calls", "abort", "error").
  void count_finish(const std::string& reason);
  void observe_ttft(double seconds);
  void observe_itl(double seconds);
  void observe_e2e(double seconds);

  /// The exposition text (content type text/plain; version=0.0.4). `model` labels the series.
  /// `cache`: the prefix cache's counters, or null when it is off.
  std::string render(const SchedulerStats& s, const std::string& model, const PrefixCacheStats* cache = nullptr) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, uint64_t> finishes_;
  Histogram ttft_, itl_, e2e_;
};

}  // namespace k3::server
