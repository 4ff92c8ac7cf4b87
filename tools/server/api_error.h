// k3::server::ApiError — an error that becomes an OpenAI-style HTTP error response
// {"error": {"message", "type", "param", "code"}} (spec serving.md "Errors").
#pragma once
#include <stdexcept>
#include <string>

namespace k3::server {

/// Thrown by request parsing / validation and by the endpoints; the HTTP layer turns it into
/// the status and body below. `param` names the request field at fault ("" when none).
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string type = {})
      : std::runtime_error(message),
        status_(status),
        param_(std::move(param)),
        type_(type.empty() ? default_type(status) : std::move(type)) {}

  int status() const { return status_; }
  const std::string& param() const { return param_; }
  /// OpenAI/vLLM error type: BadRequestError (400), AuthenticationError (401),
  /// NotFoundError (404), ... unless given explicitly.
  const std::string& type() const { return type_; }

  /// The error type vLLM uses for an HTTP status.
  static std::string default_type(int status) {
    switch (status) {
      case 400: return "BadRequestError";
      case 401: return "AuthenticationError";
      case 404: return "NotFoundError";
      case 405: return "MethodNotAllowedError";
      case 413: return "RequestTooLargeError";
      case 429: return "RateLimitError";
      case 503: return "ServiceUnavailableError";
      default: return status >= 500 ? "InternalServerError" : "BadRequestError";
    }
  }

 private:
  int status_;
  std::string param_;
  std::string type_;
};

/// Shorthand for a 400 naming `param`.
inline ApiError bad_request(const std::string& param, const std::string& message) {
  return ApiError(400, message, param);
}

}  // namespace k3::server
