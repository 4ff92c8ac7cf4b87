// SseWriter — writes a chunked response body to an httplib DataSink and notices a client that
// went away: a failed write, or (while nothing is due) a failed heartbeat sent after `idle`
// without a write. The heartbeat is text the client ignores: an SSE comment (`: keep-alive`)
// for event streams (the default), or a JSON-legal whitespace ("\n") written before the one
// JSON object of a non-streaming answer (kJsonHeartbeat).
#pragma once
#include <httplib.h>

#include <chrono>
#include <string>

namespace k3::server {

/// The heartbeat of a non-streaming JSON body: leading whitespace, which JSON parsers skip.
inline constexpr const char* kJsonHeartbeat = "\n";
/// The heartbeat of an SSE stream: a comment line, which SSE clients skip.
inline constexpr const char* kSseHeartbeat = ": keep-alive\n\n";

class SseWriter {
 public:
  explicit SseWriter(httplib::DataSink& sink, std::chrono::milliseconds idle = std::chrono::milliseconds(1000),
                     std::string heartbeat = kSseHeartbeat)
      : sink_(sink), idle_(idle), heartbeat_(std::move(heartbeat)), last_(std::chrono::steady_clock::now()) {}

  /// Writes raw body text; false when the client is gone.
  bool write(const std::string& text) {
    last_ = std::chrono::steady_clock::now();
    return sink_.write(text.data(), text.size());
  }
  /// For polling (while no event arrives, or between events): true while the client is still
  /// there. Sends the heartbeat when nothing was written for `idle`.
  bool alive() {
    if (std::chrono::steady_clock::now() - last_ >= idle_) return write(heartbeat_);
    return sink_.is_writable();
  }
  void done() { sink_.done(); }

 private:
  httplib::DataSink& sink_;
  std::chrono::milliseconds idle_;
  std::string heartbeat_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace k3::server
