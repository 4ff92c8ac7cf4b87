// HttpServer: cpp-httplib wiring. The pre-routing handler runs once the headers are parsed and
// before any body is read: it refuses ambiguous framing (400) and applies the request policy
// (request_policy.h: 403 Host / Origin, 401 key, 415 Content-Type, CORS headers and
// preflights). Every handler runs inside `guarded()`, which checks the state (503) and turns
// ApiError / other exceptions into OpenAI error bodies.
#include "http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>

#include "api_error.h"
#include "core/error.h"
#include "endpoints.h"
#include "agent_api.h"
#include "openai_response.h"
#include "web_page.h"

namespace k3::server {
namespace {

using Handler = std::function<void(const ServeContext&, const httplib::Request&, httplib::Response&)>;

// Errors in the shape of the API the path belongs to: Anthropic's under /v1/messages, OpenAI's elsewhere.
void send_error(const httplib::Request& req, httplib::Response& res, const ApiError& e) {
  const bool anthropic = req.path.rfind("/v1/messages", 0) == 0;
  send_json(res, anthropic ? anthropic_error_body(e) : error_body(e), e.status());
}

// Known routes and their method, for 405 and for the metrics' endpoint label.
struct Route {
  const char* method;
  const char* path;
};
constexpr Route kRoutes[] = {
    {"GET", "/health"},          {"GET", "/metrics"},   {"GET", "/v1/models"},   {"POST", "/v1/chat/completions"},
    {"POST", "/v1/completions"}, {"POST", "/tokenize"}, {"POST", "/detokenize"},
    {"POST", "/v1/responses"},   {"POST", "/v1/messages"}, {"POST", "/v1/messages/count_tokens"},
    {"GET", "/props"},           {"GET", "/version"},  {"POST", "/apply-template"},
};

std::string endpoint_label(const std::string& path) {
  for (const auto& r : kRoutes)
    if (path == r.path) return path;
  if (path.rfind("/slots", 0) == 0) return "/slots";
  if (is_web_page_path(path)) return "/";  // the chat page's files count as one endpoint
  return "other";
}

bool ascii_iequals(const std::string& a, const char* b) {
  const size_t n = std::strlen(b);
  if (a.size() != n) return false;
  for (size_t i = 0; i < n; ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != b[i]) return false;
  return true;
}

// A body whose end two HTTP parsers could place differently (request smuggling) is refused:
// more than one Content-Length, a Content-Length that is not a plain decimal number,
// Content-Length together with Transfer-Encoding, or a Transfer-Encoding other than one "chunked".
void check_framing(const httplib::Request& req) {
  const size_t n_cl = req.get_header_value_count("Content-Length");
  const size_t n_te = req.get_header_value_count("Transfer-Encoding");
  if (n_cl > 1) throw ApiError(400, "Malformed HTTP request: more than one Content-Length header");
  if (n_cl == 1) {
    const std::string v = req.get_header_value("Content-Length");
    if (v.empty() || v.size() > 18 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
      throw ApiError(400, "Malformed HTTP request: Content-Length must be a decimal number of bytes");
  }
  if (n_te > 0 && n_cl > 0)
    throw ApiError(400, "Malformed HTTP request: Content-Length and Transfer-Encoding together");
  if (n_te > 1 || (n_te == 1 && !ascii_iequals(req.get_header_value("Transfer-Encoding"), "chunked")))
    throw ApiError(400, "Malformed HTTP request: the only Transfer-Encoding accepted is 'chunked'");
}

}  // namespace

HttpServer::HttpServer(ServerConfig cfg)
    : cfg_(std::move(cfg)), svr_(std::make_unique<GuardedHttpServer>(cfg_.limits)) {
  // Threads: http_threads kept ready, more started on demand so that every admitted connection
  // (at most max_connections) has one at once, plus room to answer refused connections.
  const size_t base = static_cast<size_t>(std::max(1, cfg_.http_threads));
  const size_t max_threads = std::max(base, static_cast<size_t>(cfg_.limits.max_connections)) + 64;
  svr_->new_task_queue = [base, max_threads] { return new ConnectionThreads(base, max_threads, max_threads); };
  // SO_REUSEADDR only (httplib's default adds SO_REUSEPORT, which lets a second server share the
  // port and take half of its connections).
  svr_->set_socket_options([](socket_t sock) { httplib::set_socket_opt(sock, SOL_SOCKET, SO_REUSEADDR, 1); });
  svr_->set_payload_max_length(cfg_.max_body_bytes);
  svr_->set_read_timeout(cfg_.read_timeout_s, 0);
  svr_->set_write_timeout(cfg_.write_timeout_s, 0);
  svr_->set_keep_alive_timeout(5);
  setup_routes();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::bind() {
  errno = 0;
  if (cfg_.port == 0) {
    port_ = svr_->bind_to_any_port(cfg_.host);
    if (port_ <= 0) throw Error("--host: cannot listen on " + cfg_.host + " (any port)");
  } else {
    if (!svr_->bind_to_port(cfg_.host, cfg_.port)) {
      const int e = errno;
      const std::string why = e == EADDRINUSE      ? "address in use (another process listens on this port)"
                              : e == EADDRNOTAVAIL ? "not a local address"
                              : e != 0             ? std::strerror(e)
                                                   : "address in use, or not a local address";
      throw Error("--host/--port: cannot listen on " + cfg_.host + ":" + std::to_string(cfg_.port) + ": " + why);
    }
    port_ = cfg_.port;
  }
}

void HttpServer::start() {
  thread_ = std::thread([this] { svr_->listen_after_bind(); });
}

void HttpServer::set_ready(const ServeContext* ctx) { ctx_.store(ctx); }
void HttpServer::stop_accepting() { accepting_.store(false); }

void HttpServer::stop() {
  accepting_.store(false);
  if (svr_) svr_->stop();
  if (thread_.joinable()) thread_.join();
}

void HttpServer::setup_routes() {
  httplib::Server& s = *svr_;
  // Wraps a handler: state checks, then ApiError -> OpenAI error body. (The API key is checked
  // by the pre-routing handler, before the body is read.)
  auto guarded = [this](Handler h) {
    return [this, h](const httplib::Request& req, httplib::Response& res) {
      try {
        const ServeContext* ctx = ctx_.load();
        if (!ctx) throw ApiError(503, "Loading model", "", "ServiceUnavailableError");
        if (!accepting_.load()) throw ApiError(503, "The server is shutting down", "", "ServiceUnavailableError");
        h(*ctx, req, res);
      } catch (const ApiError& e) {
        send_error(req, res, e);
      } catch (const std::exception& e) {
        send_error(req, res, ApiError(500, std::string("internal error: ") + e.what()));
      }
    };
  };

  s.Get("/health", guarded([](const ServeContext&, const httplib::Request&, httplib::Response& res) {
          send_json(res, Json{{"status", "ok"}});
        }));
  s.Get("/metrics", guarded([](const ServeContext& c, const httplib::Request&, httplib::Response& res) {
          const PrefixCacheStats cs = c.cache ? c.cache->stats() : PrefixCacheStats{};
          res.set_content(c.metrics->render(c.scheduler->stats(), c.model_id, c.cache ? &cs : nullptr),
                          "text/plain; version=0.0.4");
        }));
  s.Get("/v1/models", guarded([](const ServeContext& c, const httplib::Request&, httplib::Response& res) {
          static const int64_t created =
              std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                  .count();
          send_json(res, Json{{"object", "list"},
                              {"data", Json::array({Json{{"id", c.model_id},
                                                         {"object", "model"},
                                                         {"created", created},
                                                         {"owned_by", "k3.cpp"},
                                                         {"max_model_len", c.n_ctx}}})}});
        }));
  s.Post("/v1/chat/completions", guarded(handle_chat));
  s.Post("/v1/completions", guarded(handle_completion));
  s.Post("/tokenize", guarded(handle_tokenize));
  s.Post("/detokenize", guarded(handle_detokenize));
  s.Post("/v1/responses", guarded(handle_responses));
  s.Post("/v1/messages", guarded(handle_messages));
  s.Post("/v1/messages/count_tokens", guarded(handle_count_tokens));
  s.Get("/props", guarded(handle_props));
  s.Get("/version", guarded(handle_version));
  s.Post("/apply-template", guarded(handle_apply_template));
  for (const char* p : {"/v1/embeddings", "/embedding", "/embeddings", "/infill", "/v1/rerank", "/rerank",
                        "/v1/reranking", "/reranking"}) {
    s.Post(p, guarded(handle_no_head));
    s.Get(p, guarded(handle_no_head));
  }
  s.Get("/slots", guarded(handle_slots_list));
  s.Post(R"(/slots/(\d+))", guarded(handle_slot_action));
  // The chat page (tools/server/web): static, no key (its requests to /v1 carry the key).
  add_web_page_routes(s);
  // OPTIONS requests other than accepted CORS preflights (answered by the pre-routing handler).
  s.Options(".*", guarded([](const ServeContext&, const httplib::Request&, httplib::Response& res) {
              res.status = 204;
              res.set_header("Allow", "GET, POST, OPTIONS");
            }));

  // 405 for the other methods of known paths.
  for (const auto& r : kRoutes) {
    const std::string method = r.method;
    auto not_allowed = [method](const httplib::Request& req, httplib::Response& res) {
      res.set_header("Allow", method);
      send_error(req, res,
                 ApiError(405, "Method " + req.method + " is not allowed on " + req.path + " (use " + method + ")"));
    };
    if (method != "GET") s.Get(r.path, not_allowed);
    if (method != "POST") s.Post(r.path, not_allowed);
    s.Put(r.path, not_allowed);
    s.Delete(r.path, not_allowed);
    s.Patch(r.path, not_allowed);
  }

  // Runs once the headers are parsed, before any body is read (httplib reads a body only after
  // routing): checks that need no body go here, so a refused request costs no body.
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    current_request_log() = RequestLog{};
    GuardedHttpServer::headers_read();  // the body deadline starts
    try {
      check_framing(req);
      const PolicyResult p = check_request_policy(cfg_.policy, request_head(req));
      for (const auto& [k, v] : p.headers) res.set_header(k.c_str(), v);
      if (p.error) throw *p.error;
      if (p.preflight) {  // an accepted CORS preflight of a --cors-origin site
        res.status = 204;
        return httplib::Server::HandlerResponse::Handled;
      }
    } catch (const ApiError& e) {
      send_error(req, res, e);  // an error status: httplib closes the connection, the body unread
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Errors raised by httplib itself (no handler ran or it left no body).
  s.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const std::string timeout = GuardedHttpServer::timeout_reason();
    if (!timeout.empty() && (res.status == 400 || res.status == 408)) {
      send_error(req, res, ApiError(408, "Request timeout: " + timeout));
      return httplib::Server::HandlerResponse::Handled;
    }
    std::string msg;
    switch (res.status) {
      case 404: msg = "Not found: " + req.method + " " + req.path; break;
      case 413:
        msg = "Request body too large: the limit is " + std::to_string(cfg_.max_body_bytes >> 20) + " MiB";
        break;
      case 400: msg = "Malformed HTTP request"; break;
      default: msg = "HTTP error " + std::to_string(res.status); break;
    }
    send_error(req, res, ApiError(res.status, msg));
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(req, res, ApiError(500, "internal error: " + what));
  });
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    const RequestLog& log = current_request_log();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - req.start_time_).count();
    const ServeContext* ctx = ctx_.load();
    if (ctx) ctx->metrics->count_request(endpoint_label(req.path), res.status);
    if (cfg_.log_json) {
      const Json line{{"msg", "request"},
                      {"method", req.method},
                      {"path", req.path},
                      {"status", res.status},
                      {"prompt_tokens", std::max<int64_t>(log.prompt_tokens, 0)},
                      {"generated_tokens", std::max<int64_t>(log.generated_tokens, 0)},
                      {"ms", ms}};
      // dump escapes control characters; invalid UTF-8 in the path becomes U+FFFD
      std::fprintf(stderr, "%s\n", line.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
      current_request_log() = RequestLog{};
      return;
    }
    std::fprintf(stderr, "k3 serve: %s %s %d | prompt %lld tok | gen %lld tok | %.1f ms\n",
                 escape_for_log(req.method).c_str(), escape_for_log(req.path).c_str(), res.status,
                 static_cast<long long>(std::max<int64_t>(log.prompt_tokens, 0)),
                 static_cast<long long>(std::max<int64_t>(log.generated_tokens, 0)), ms);
    // A request httplib refuses before the pre-routing handler runs must not show these counts.
    current_request_log() = RequestLog{};
  });
}

}  // namespace k3::server
