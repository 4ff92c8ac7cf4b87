// StopMatcher: earliest full match wins; the longest suffix that is a proper prefix of a stop
// string is held back. A held suffix equals the start of a (valid UTF-8) stop string, so the
// released text always ends on a character boundary.
#include "stop_matcher.h"

#include <algorithm>
#include <utility>

namespace k3::server {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopMatcher::push(const std::string& text) {
  if (matched_) return {};
  held_ += text;
  if (stops_.empty()) return std::exchange(held_, {});
  std::size_t best = std::string::npos;
  for (const auto& s : stops_)
    if (const std::size_t at = held_.find(s); at < best) {
      best = at;
      matched_stop_ = s;
    }
  if (best != std::string::npos) {
    matched_ = true;
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  std::size_t hold = 0;
  for (const auto& s : stops_) {
    const std::size_t max_k = std::min(s.size() - 1, held_.size());
    for (std::size_t k = max_k; k > hold; --k)
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  if (matched_) return {};
  return std::exchange(held_, {});
}

}  // namespace k3::server
