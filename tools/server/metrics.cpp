// Metrics: counters and histograms under one mutex; gauges read from SchedulerStats at scrape.
#include "metrics.h"

#include <cstdio>

namespace k3::server {
namespace {

std::string num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

std::string label_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\' || c == '"') o.push_back('\\');
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o.push_back(c);
  }
  return o;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  std::size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name) const {
  uint64_t cum = 0;
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += name + "_bucket{le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  cum += counts_.back();
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cum) + "\n";
  out += name + "_sum " + num(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
             80.0}),
      itl_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}),
      e2e_({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0}) {}

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++requests_[{endpoint, status}];
}
void Metrics::count_finish(const std::string& reason) {
  std::lock_guard<std::mutex> lk(mu_);
  ++finishes_[reason];
}
void Metrics::observe_ttft(double s) {
  std::lock_guard<std::mutex> lk(mu_);
  ttft_.observe(s);
}
void Metrics::observe_itl(double s) {
  std::lock_guard<std::mutex> lk(mu_);
  itl_.observe(s);
}
void Metrics::observe_e2e(double s) {
  std::lock_guard<std::mutex> lk(mu_);
  e2e_.observe(s);
}

std::string Metrics::render(const SchedulerStats& s, const std::string& model, const PrefixCacheStats* cache) const {
  const std::string lbl = "{model_name=\"" + label_escape(model) + "\"}";
  std::string out;
  auto gauge = [&](const char* name, const char* type, const char* help, double v) {
    header(out, std::string("k3:") + name, type, help);
    out += std::string("k3:") + name + lbl + " " + num(v) + "\n";
  };
  gauge("num_requests_running", "gauge", "Sequences in scheduler slots.", static_cast<double>(s.running));
  gauge("num_requests_waiting", "gauge", "Requests queued for a slot.", static_cast<double>(s.waiting));
  gauge("sequence_state_bytes", "gauge", "Bytes of sequence state (KDA + conv + MLA cache) held by running sequences.",
        static_cast<double>(s.state_bytes));
  gauge("prompt_tokens_total", "counter", "Prompt tokens prefilled.", static_cast<double>(s.prompt_tokens_total));
  gauge("generation_tokens_total", "counter", "Tokens generated.", static_cast<double>(s.generated_tokens_total));
  gauge("engine_steps_total", "counter", "Batched forward steps of the engine.", static_cast<double>(s.steps_total));
  gauge("sequences_finished_total", "counter", "Sequences ended (any reason).", static_cast<double>(s.finished_total));
  gauge("spec_verifies_total", "counter", "Speculative verify windows (a pending id and >= 1 draft id).",
        static_cast<double>(s.spec_verifies_total));
  gauge("spec_drafted_total", "counter", "Draft ids verified by speculative decoding.",
        static_cast<double>(s.spec_drafted_total));
  gauge("spec_accepted_total", "counter", "Draft ids accepted by speculative decoding.",
        static_cast<double>(s.spec_accepted_total));
  gauge("engine_absorbed_errors_total", "counter",
        "Errors the engine logged and went on from (kept-state capture, prefix-cache store, drafter).",
        static_cast<double>(s.absorbed_errors_total));
  if (cache != nullptr) {  // vLLM's prefix_cache_queries / prefix_cache_hits count tokens
    const auto d = [](uint64_t v) { return static_cast<double>(v); };
    gauge("prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
          d(cache->tokens_looked_up));
    gauge("prefix_cache_hits_total", "counter", "Prompt tokens served by the prefix cache (not recomputed).",
          d(cache->tokens_reused));
    gauge("prefix_cache_lookups_total", "counter", "Prefix cache lookups (one per request).", d(cache->lookups));
    gauge("prefix_cache_hit_requests_total", "counter", "Requests that resumed from the prefix cache.", d(cache->hits));
    gauge("prefix_cache_ram_bytes", "gauge", "Bytes of the prefix cache in RAM (MLA blocks + KDA snapshots).",
          d(cache->ram_bytes));
    gauge("prefix_cache_ram_blocks", "gauge", "Prefix cache blocks in RAM.", d(cache->ram_blocks));
    gauge("prefix_cache_ram_snapshots", "gauge", "KDA state snapshots in RAM.", d(cache->ram_snapshots));
    gauge("prefix_cache_evictions_total", "counter", "Prefix cache blocks evicted from RAM.", d(cache->evictions));
    gauge("prefix_cache_disk_bytes", "gauge", "Bytes of the prefix cache's disk tier.", d(cache->disk_bytes));
    gauge("prefix_cache_disk_blocks", "gauge", "Blocks in the prefix cache's disk tier.", d(cache->disk_blocks));
    gauge("prefix_cache_disk_reads_total", "counter", "Blocks read back from the disk tier.", d(cache->disk_reads));
    gauge("prefix_cache_disk_writes_total", "counter", "Blocks written to the disk tier.", d(cache->disk_writes));
    gauge("prefix_cache_disk_rejected_total", "counter", "Disk tier files refused (corrupt, truncated, foreign).",
          d(cache->disk_rejected));
    gauge("prefix_cache_disk_write_failures_total", "counter",
          "Blocks that could not be written to the disk tier (disk full; logged once).", d(cache->disk_write_failures));
  }

  std::lock_guard<std::mutex> lk(mu_);
  header(out, "k3:requests_total", "counter", "HTTP requests by endpoint and status.");
  for (const auto& [k, v] : requests_)
    out += "k3:requests_total{endpoint=\"" + label_escape(k.first) + "\",status=\"" + std::to_string(k.second) +
           "\"} " + std::to_string(v) + "\n";
  header(out, "k3:request_success_total", "counter", "Finished generations by finish reason.");
  for (const auto& [k, v] : finishes_)
    out += "k3:request_success_total{model_name=\"" + label_escape(model) + "\",finished_reason=\"" + label_escape(k) +
           "\"} " + std::to_string(v) + "\n";
  header(out, "k3:time_to_first_token_seconds", "histogram", "Time from submission to the first generated token.");
  ttft_.render(out, "k3:time_to_first_token_seconds");
  header(out, "k3:inter_token_latency_seconds", "histogram", "Time between consecutive generated tokens.");
  itl_.render(out, "k3:inter_token_latency_seconds");
  header(out, "k3:e2e_request_latency_seconds", "histogram", "Time from submission to the end of the sequence.");
  e2e_.render(out, "k3:e2e_request_latency_seconds");
  return out;
}

}  // namespace k3::server
