// HttpServer: cpp-httplib wiring. Every handler runs inside `guarded()`, which checks the state
// (503) and the request policy (request_policy.h: 403 Host / Origin, 401 key, 415 Content-Type,
// CORS headers and preflights) and turns ApiError / other exceptions into OpenAI error bodies.
#include "http_server.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <functional>

#include "api_error.h"
#include "core/error.h"
#include "endpoints.h"
#include "openai_response.h"
#include "web_page.h"

namespace k3::server {
namespace {

using Handler = std::function<void(const ServeContext&, const httplib::Request&, httplib::Response&)>;

thread_local std::chrono::steady_clock::time_point t_start;

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, error_body(e), e.status()); }

// Runs the request policy: adds its CORS headers, throws its refusal, answers an accepted
// preflight (204). Returns false when the response is complete.
bool apply_policy(const PolicyConfig& policy, const httplib::Request& req, httplib::Response& res) {
  PolicyResult p = check_request_policy(policy, request_head(req));
  for (const auto& [k, v] : p.headers) res.set_header(k.c_str(), v);
  if (p.error) throw *p.error;
  if (p.preflight) res.status = 204;
  return !p.preflight;
}

// Known routes and their method, for 405 and for the metrics' endpoint label.
struct Route {
  const char* method;
  const char* path;
};
constexpr Route kRoutes[] = {
    {"GET", "/health"},           {"GET", "/metrics"},     {"GET", "/v1/models"},
    {"POST", "/v1/chat/completions"}, {"POST", "/v1/completions"}, {"POST", "/tokenize"},
    {"POST", "/detokenize"},
};

std::string endpoint_label(const std::string& path) {
  for (const auto& r : kRoutes)
    if (path == r.path) return path;
  if (path.rfind("/slots", 0) == 0) return "/slots";
  if (is_web_page_path(path)) return "/";  // the chat page's files count as one endpoint
  return "other";
}

}  // namespace

HttpServer::HttpServer(ServerConfig cfg) : cfg_(std::move(cfg)), svr_(std::make_unique<httplib::Server>()) {
  const int n = cfg_.http_threads;
  svr_->new_task_queue = [n] { return new httplib::ThreadPool(static_cast<size_t>(n)); };
  svr_->set_payload_max_length(cfg_.max_body_bytes);
  svr_->set_read_timeout(cfg_.read_timeout_s, 0);
  svr_->set_write_timeout(cfg_.write_timeout_s, 0);
  svr_->set_keep_alive_timeout(5);
  setup_routes();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::bind() {
  if (cfg_.port == 0) {
    port_ = svr_->bind_to_any_port(cfg_.host);
    if (port_ <= 0) throw Error("--host: cannot listen on " + cfg_.host + " (any port)");
  } else {
    if (!svr_->bind_to_port(cfg_.host, cfg_.port))
      throw Error("--host/--port: cannot listen on " + cfg_.host + ":" + std::to_string(cfg_.port) +
                  " (address in use, or not a local address)");
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
  // Wraps a handler: state and auth checks, then ApiError -> OpenAI error body.
  // The key requirement of a path is the policy's (request_policy.h); `needs_auth` documents it.
  auto guarded = [this](bool /*needs_auth*/, Handler h) {
    return [this, h](const httplib::Request& req, httplib::Response& res) {
      try {
        const ServeContext* ctx = ctx_.load();
        if (!ctx) throw ApiError(503, "Loading model", "", "ServiceUnavailableError");
        if (!accepting_.load()) throw ApiError(503, "The server is shutting down", "", "ServiceUnavailableError");
        if (!apply_policy(cfg_.policy, req, res)) return;
        h(*ctx, req, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const std::exception& e) {
        send_error(res, ApiError(500, std::string("internal error: ") + e.what()));
      }
    };
  };

  s.Get("/health", guarded(false, [](const ServeContext&, const httplib::Request&, httplib::Response& res) {
          send_json(res, Json{{"status", "ok"}});
        }));
  s.Get("/metrics", guarded(false, [](const ServeContext& c, const httplib::Request&, httplib::Response& res) {
          const PrefixCacheStats cs = c.cache ? c.cache->stats() : PrefixCacheStats{};
          res.set_content(c.metrics->render(c.scheduler->stats(), c.model_id, c.cache ? &cs : nullptr),
                          "text/plain; version=0.0.4");
        }));
  s.Get("/v1/models", guarded(true, [](const ServeContext& c, const httplib::Request&, httplib::Response& res) {
          static const int64_t created =
              std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
          send_json(res, Json{{"object", "list"},
                              {"data", Json::array({Json{{"id", c.model_id},
                                                         {"object", "model"},
                                                         {"created", created},
                                                         {"owned_by", "k3.cpp"},
                                                         {"max_model_len", c.n_ctx}}})}});
        }));
  s.Post("/v1/chat/completions", guarded(true, handle_chat));
  s.Post("/v1/completions", guarded(true, handle_completion));
  s.Post("/tokenize", guarded(true, handle_tokenize));
  s.Post("/detokenize", guarded(true, handle_detokenize));
  s.Get("/slots", guarded(true, handle_slots_list));
  s.Post(R"(/slots/(\d+))", guarded(true, handle_slot_action));
  // The chat page (tools/server/web): static, no key (its requests to /v1 carry the key).
  add_web_page_routes(s);
  // CORS preflights of --cors-origin sites (204); other OPTIONS requests get the allowed methods.
  s.Options(".*", guarded(false, [](const ServeContext&, const httplib::Request&, httplib::Response& res) {
              res.status = 204;
              res.set_header("Allow", "GET, POST, OPTIONS");
            }));

  // 405 for the other methods of known paths.
  for (const auto& r : kRoutes) {
    const std::string method = r.method;
    auto not_allowed = [method](const httplib::Request& req, httplib::Response& res) {
      res.set_header("Allow", method);
      send_error(res, ApiError(405, "Method " + req.method + " is not allowed on " + req.path + " (use " + method + ")"));
    };
    if (method != "GET") s.Get(r.path, not_allowed);
    if (method != "POST") s.Post(r.path, not_allowed);
    s.Put(r.path, not_allowed);
    s.Delete(r.path, not_allowed);
    s.Patch(r.path, not_allowed);
  }

  s.set_pre_routing_handler([](const httplib::Request&, httplib::Response&) {
    t_start = std::chrono::steady_clock::now();
    current_request_log() = RequestLog{};
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Errors raised by httplib itself (no handler ran or it left no body).
  s.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string msg;
    switch (res.status) {
      case 404: msg = "Not found: " + req.method + " " + req.path; break;
      case 413:
        msg = "Request body too large: the limit is " + std::to_string(cfg_.max_body_bytes >> 20) + " MiB";
        break;
      case 400: msg = "Malformed HTTP request"; break;
      default: msg = "HTTP error " + std::to_string(res.status); break;
    }
    send_error(res, ApiError(res.status, msg));
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, ApiError(500, "internal error: " + what));
  });
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    const RequestLog& log = current_request_log();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();
    const ServeContext* ctx = ctx_.load();
    if (ctx) ctx->metrics->count_request(endpoint_label(req.path), res.status);
    std::fprintf(stderr, "k3 serve: %s %s %d | prompt %lld tok | gen %lld tok | %.1f ms\n", req.method.c_str(),
                 req.path.c_str(), res.status, static_cast<long long>(std::max<int64_t>(log.prompt_tokens, 0)),
                 static_cast<long long>(std::max<int64_t>(log.generated_tokens, 0)), ms);
  });
}

}  // namespace k3::server
