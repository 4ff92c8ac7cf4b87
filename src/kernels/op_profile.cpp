#include "kernels/op_profile.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>

namespace k3::prof {

namespace {
std::atomic<bool> g_on{false};
std::mutex g_mu;
std::map<std::string, OpStat, std::less<>>& rows() {
  static std::map<std::string, OpStat, std::less<>> m;
  return m;
}
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void set_enabled(bool on) { g_on.store(on, std::memory_order_relaxed); }
bool enabled() { return g_on.load(std::memory_order_relaxed); }

void reset() {
  std::lock_guard<std::mutex> lk(g_mu);
  rows().clear();
}

std::vector<OpStat> snapshot() {
  std::vector<OpStat> v;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    for (const auto& [k, s] : rows()) v.push_back(s);
  }
  std::sort(v.begin(), v.end(), [](const OpStat& a, const OpStat& b) { return a.seconds > b.seconds; });
  return v;
}

std::string op_name(std::string_view n) {
  for (std::string_view p : {"language_model.", "model."})
    if (n.substr(0, p.size()) == p) n.remove_prefix(p.size());
  if (n.substr(0, 7) == "layers.") {
    const size_t dot = n.find('.', 7);
    n.remove_prefix(dot == std::string_view::npos ? n.size() : dot + 1);
  }
  constexpr std::string_view kW = ".weight";
  if (n.size() >= kW.size() && n.substr(n.size() - kW.size()) == kW) n.remove_suffix(kW.size());
  return std::string(n);
}

Scope::Scope(std::string_view name, double bytes) : name_(name), bytes_(bytes) {
  if (enabled() && !omp_in_parallel()) t0_ns_ = now_ns();
}

Scope::~Scope() {
  if (t0_ns_ < 0) return;
  const double s = 1e-9 * static_cast<double>(now_ns() - t0_ns_);
  std::string key = op_name(name_);
  std::lock_guard<std::mutex> lk(g_mu);
  OpStat& r = rows()[key];
  if (r.name.empty()) r.name = key;
  r.seconds += s;
  r.bytes += bytes_;
  r.calls += 1;
}

}  // namespace k3::prof
