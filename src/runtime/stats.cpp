// Peak RSS from /proc and the stats line.
#include "runtime/stats.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace k3 {

uint64_t peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      unsigned long long kb = 0;
      if (std::sscanf(line.c_str() + 6, "%llu", &kb) == 1) return static_cast<uint64_t>(kb) * 1024;
      return 0;
    }
  }
  return 0;
}

namespace {
std::string rate(int64_t n, double ms) {
  if (n <= 0 || ms <= 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", static_cast<double>(n) * 1000.0 / ms);
  return b;
}
}  // namespace

std::string RunStats::line() const {
  char b[320];
  std::snprintf(
      b, sizeof b,
      "load: %.0f ms | prompt: %lld tok, %s tok/s | gen: %lld tok, %s tok/s | peak RSS: %.1f MiB | state: %.2f MiB",
      load_ms, static_cast<long long>(n_prompt), rate(n_prompt, prompt_ms).c_str(), static_cast<long long>(n_gen),
      rate(n_gen, gen_ms).c_str(), static_cast<double>(peak_rss_bytes()) / (1024.0 * 1024.0),
      static_cast<double>(state_bytes) / (1024.0 * 1024.0));
  std::string s = b;
  if (!threads.empty()) s += " | threads: " + threads;
  if (show_seed) s += " | seed: " + std::to_string(seed);
  return s;
}

}  // namespace k3
