// SseWriter — writes a chunked response body to an httplib DataSink and notices a client that
// went away: a failed write, or (while nothing is due) a failed heartbeat sent after `idle`
// without a write. The heartbeat is text the client ignores: an SSE comment (`: keep-alive`)
// for event streams (the default), or a JSON-legal whitespace ("\n") written before the one
// JSON object of a non-streaming answer (kJsonHeartbeat).
#pragma once
#include <httplib.h>

#include <chrono>
#include <string>

#include "api_error.h"
#include "openai_response.h"

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

/// Runs a content provider's body `run()` (returns what the provider returns). An exception
/// must not escape a provider (it would end the process) and the 200 header is already sent, so
/// it becomes an OpenAI error object (500) in the body: as an SSE event followed by [DONE] when
/// `sse_framing`, else the bare JSON. Returns true after reporting an error.
template <class Run>
bool guarded_provider(httplib::DataSink& sink, bool sse_framing, Run&& run) {
  try {
    return run();
  } catch (const std::exception& e) {
    const Json err = error_body(ApiError(500, std::string("generation failed: ") + e.what()));
    const std::string t = sse_framing ? sse(err) + sse_done() : err.dump();
    sink.write(t.data(), t.size());
    sink.done();
    return true;
  }
}

}  // namespace k3::server
