// Text stop strings ("stop" of the OpenAI APIs) over streamed text: text is released only once
// it cannot be the start of a stop string, and the output is cut where the first stop string
// begins (the stop string itself is not returned).
#pragma once
#include <string>
#include <vector>

namespace k3::server {

class StopMatcher {
 public:
  /// stops: non-empty UTF-8 strings (empty ones are ignored).
  explicit StopMatcher(std::vector<std::string> stops);

  /// Adds text (valid UTF-8); returns the text that is now safe to emit. After a match returns
  /// only the text before the stop string, then "" for every later call.
  std::string push(const std::string& text);
  /// Ends the stream: returns the held-back text (none after a match).
  std::string flush();
  /// True once a stop string was found.
  bool matched() const { return matched_; }
  /// The stop string that matched ("" before a match).
  const std::string& matched_stop() const { return matched_stop_; }
  bool active() const { return !stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
  std::string matched_stop_;
};

}  // namespace k3::server
