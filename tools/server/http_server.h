// k3::server::HttpServer — the cpp-httplib server of `k3 serve`: routes (OpenAI endpoints,
// /tokenize, /detokenize, /health, /metrics), checks that run before a body is read (framing:
// 400 for ambiguous Content-Length / Transfer-Encoding; the request policy of request_policy.h:
// Host, Origin / CORS, API and metrics keys, Content-Type), OpenAI error bodies for
// every failure (404 unknown path, 405 wrong method, 408 read timeout, 413 body over the limit,
// 503 while loading or shutting down), connection limits and read deadlines (http_transport.h),
// one log line per request on stderr (request text escaped), and an orderly stop.
//
// Life cycle: bind() -> start() (serves /health with 503 "loading") -> set_ready(ctx) ->
// stop_accepting() (new requests get 503) -> stop() (closes the listener, waits for in-flight
// requests). Thread-safe between these calls and the request threads.
#pragma once
#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>

#include "request_policy.h"
#include "http_transport.h"
#include "serve_context.h"

namespace k3::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                         ///< 0: pick a free port (see HttpServer::port())
  PolicyConfig policy;                     ///< keys, Host, Origin and Content-Type checks (request_policy.h)
  int http_threads = 16;                   ///< request threads kept ready (each connection holds one; more
                                           ///< start on demand up to limits.max_connections)
  std::size_t max_body_bytes = 32u << 20;  ///< larger bodies get 413
  int read_timeout_s = 30;                 ///< socket read timeout (slow or stalled clients)
  int write_timeout_s = 30;                ///< socket write timeout (a stalled stream is cancelled)
  ConnectionLimits limits;                 ///< connections overall / per client IP, header and body deadlines
  bool log_json = false;                   ///< --log-format json: request log lines as JSON objects
};

class HttpServer {
 public:
  explicit HttpServer(ServerConfig cfg);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// Binds the listening socket (SO_REUSEADDR, never SO_REUSEPORT: a port another server listens
  /// on is refused). Errors: k3::Error "--host/--port: cannot listen on H:P: address in use ...".
  void bind();
  /// Starts the accept loop on its own thread (requests are answered 503 until set_ready).
  void start();
  /// The model is loaded: serve `ctx` (which must outlive the server) from now on.
  void set_ready(const ServeContext* ctx);
  /// New requests are answered 503 from now on; running ones continue.
  void stop_accepting();
  /// Closes the listener and joins the accept thread, which waits for in-flight requests.
  void stop();
  /// The bound port.
  int port() const { return port_; }

 private:
  void setup_routes();

  ServerConfig cfg_;
  std::unique_ptr<GuardedHttpServer> svr_;
  std::thread thread_;
  std::atomic<const ServeContext*> ctx_{nullptr};
  std::atomic<bool> accepting_{true};
  int port_ = 0;
};

}  // namespace k3::server
