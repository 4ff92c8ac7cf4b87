// k3::server::GuardedHttpServer — the connection layer of `k3 serve`: an httplib::Server whose
// connections are served by its own socket loop, which
//   - admits a connection only while fewer than `max_connections` are open overall and fewer
//     than `max_connections_per_client` from its client IP; a refused connection gets a 503
//     (overall) or 429 (per client) OpenAI error body at once and is closed, without taking a
//     request thread for longer than that;
//   - gives the request line and headers `header_timeout` in all, and the body `body_timeout`
//     in all from the end of the headers (on top of the per-read timeout), so a client that
//     trickles bytes cannot hold a thread;
//   - hands every request to httplib's parser (Server::process_request), so the routes,
//     handlers and limits of httplib apply unchanged, and ends the connection after a response
//     that says "Connection: close" (httplib's own loop would read on; this server's header
//     writer, set by the constructor, notices it: do not replace it with set_header_writer).
// The body deadline starts when the pre-routing handler calls headers_read().
#pragma once
#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace k3::server {

struct ConnectionLimits {
  int max_connections = 512;                        ///< open connections overall (more get 503)
  int max_connections_per_client = 128;             ///< open connections per client IP (more get 429)
  std::chrono::milliseconds header_timeout{10000};  ///< request line + headers, in all
  std::chrono::milliseconds body_timeout{60000};    ///< request body, in all
};

class GuardedHttpServer : public httplib::Server {
 public:
  explicit GuardedHttpServer(const ConnectionLimits& limits);

  /// Called on a request thread once the headers of its request are parsed (the pre-routing
  /// handler): the body's deadline starts now.
  static void headers_read();
  /// On a request thread whose current request stopped because a read timed out (the per-read
  /// timeout, or the header or body deadline): why, naming the flag; else "". The error handler
  /// then answers 408 rather than 400.
  static std::string timeout_reason();

 private:
  bool process_and_close_socket(socket_t sock) override;
  // Waits up to the keep-alive timeout for the next request's first bytes; false when none
  // came or the server stopped listening.
  bool wait_for_request(socket_t sock) const;
  bool admit(const std::string& ip, std::string& refusal, int& status);
  void release(const std::string& ip);

  ConnectionLimits limits_;
  std::mutex mu_;
  int open_ = 0;
  std::map<std::string, int> per_client_;
  std::chrono::steady_clock::time_point last_refusal_log_{};
  long long refused_since_log_ = 0;
};

/// The request threads: a job (a connection) runs at once on an idle thread, or on a new one
/// while fewer than `max_threads` run; beyond that it waits (at most `max_queued` jobs; more are
/// refused, and httplib closes their connection). `base_threads` stay; threads above that end
/// after `idle_exit` without work. (httplib's ThreadPool starts a new thread only when no
/// thread is idle, counting a thread already woken for an earlier job as idle: two connections
/// accepted together could then wait behind one slow client.)
class ConnectionThreads final : public httplib::TaskQueue {
 public:
  ConnectionThreads(size_t base_threads, size_t max_threads, size_t max_queued,
                    std::chrono::seconds idle_exit = std::chrono::seconds(3));
  ~ConnectionThreads() override;
  bool enqueue(std::function<void()> fn) override;
  void shutdown() override;

 private:
  void spawn();
  void worker();

  const size_t base_, max_, max_queued_;
  const std::chrono::seconds idle_exit_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::list<std::function<void()>> jobs_;
  std::map<std::thread::id, std::thread> threads_;
  std::vector<std::thread> finished_;  // ended threads, joined by the next enqueue / shutdown
  size_t idle_ = 0;
  bool shutdown_ = false;
};

/// `s` with every byte outside printable ASCII (0x20..0x7e) and the backslash written as
/// \xNN, for log lines that carry text from a request.
std::string escape_for_log(const std::string& s);

}  // namespace k3::server
