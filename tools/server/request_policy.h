// k3::server request policy: who may call `k3 serve`, from where, and with what body type. Plain
// functions over header values (no socket, no HTTP library), called once per request before its
// handler runs:
//
//   1. Host (DNS rebinding): a browser page of another site whose name was re-pointed at this
//      server's address sends that name in Host. Accepted: no Host header (non-browser HTTP/1.0
//      clients), IP literals (127.0.0.1, [::1], 192.168.1.5: an address cannot be rebound),
//      `localhost` and `*.localhost` (browsers resolve those to loopback themselves), the --host
//      value, and every --allowed-host name (`*`: any). The port is not checked (an SSH tunnel
//      or a proxy may use another one). Anything else: 403.
//   2. Origin (cross-site requests): no Origin header (non-browser clients, same-origin GETs),
//      an Origin whose host[:port] is the request's Host (the chat page at `/`), or an origin
//      listed with --cors-origin (`*`: any) pass; every other Origin gets 403. Listed origins get
//      CORS response headers, and their preflight (OPTIONS with Access-Control-Request-Method)
//      is answered 204 without a key.
//   3. API key: with keys set (--api-key, repeatable, and --api-key-file), every path but
//      /health, /metrics and the chat page's files needs `Authorization: Bearer KEY` (or
//      Anthropic's `x-api-key: KEY`). /metrics
//      needs a --metrics-key when one is set (and then no API key opens it, so that API users do
//      not read server-wide counters), else an API key when keys are set, else nothing. Keys are
//      kept as SHA-256 digests and compared in constant time (CRYPTO_memcmp over digests: the
//      time depends neither on the key's content nor on its length).
//   4. Content-Type: a POST to an API path whose Content-Type is not application/json (an
//      optional charset must be utf-8) gets 415. A POST without Content-Type passes (non-browser
//      clients; a browser sends an Origin with every cross-site POST, refused above).
//
// Also the prefix-cache partition of a request (cache_partition): requests of different
// partitions never reuse each other's cached blocks (prefix_cache.h).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api_error.h"

namespace k3::server {

/// How the prefix cache is split between clients (--cache-partition).
enum class CachePartition {
  None,  ///< one cache for everyone
  Key,   ///< one partition per API key (when two or more keys are set; one key is one partition)
  User,  ///< one partition per API key and OpenAI `user` field
};

/// Parses "none" | "key" | "user". Errors: k3::Error naming --cache-partition.
CachePartition parse_cache_partition(const std::string& s);
const char* cache_partition_name(CachePartition p);

using KeyDigest = std::array<unsigned char, 32>;  ///< SHA-256 of a key

struct PolicyConfig {
  std::vector<KeyDigest> api_keys;         ///< empty: no key needed
  std::vector<KeyDigest> metrics_keys;     ///< non-empty: /metrics needs one of these (and only these)
  std::string bound_host;                  ///< --host (accepted in Host)
  std::vector<std::string> allowed_hosts;  ///< --allowed-host names, lower case; "*" = any Host
  std::vector<std::string> cors_origins;   ///< --cors-origin values, normalized; "*" = any Origin
  CachePartition partition = CachePartition::None;
};

/// SHA-256 of `key`.
KeyDigest key_digest(const std::string& key);

/// Reads --api-key-file / --metrics-key-file `path` (named `flag` in errors): one key per line;
/// surrounding white space is trimmed, blank lines and lines starting with '#' are skipped.
/// Errors (k3::Error naming the flag and the file): unreadable, a directory, writable by other
/// users (anyone could add a key), or holding no key. A file readable by other users is
/// accepted with a warning on stderr (container secrets are often mounted 0644 or 0444).
std::vector<std::string> read_key_file(const std::string& flag, const std::string& path);

/// Builds the policy from the flags. Errors: k3::Error naming the flag (an empty key, a
/// --cors-origin that is not `*`, `null` or scheme://host[:port], an empty --allowed-host).
PolicyConfig make_policy(const std::vector<std::string>& api_keys, const std::vector<std::string>& metrics_keys,
                         const std::string& bound_host, const std::vector<std::string>& allowed_hosts,
                         const std::vector<std::string>& cors_origins, CachePartition partition);

/// What the policy needs of a request (header values; nullopt when the header is absent).
struct RequestHead {
  std::string method;  ///< "GET", "POST", "OPTIONS", ...
  std::string path;    ///< without the query string
  std::optional<std::string> host, origin, authorization, content_type;
  std::optional<std::string> acr_method;   ///< Access-Control-Request-Method
  std::optional<std::string> acr_headers;  ///< Access-Control-Request-Headers
};

/// A RequestHead from any request type with `method`, `path`, has_header() and
/// get_header_value() (cpp-httplib's Request).
template <class Req>
RequestHead request_head(const Req& r) {
  auto get = [&](const char* name) -> std::optional<std::string> {
    if (!r.has_header(name)) return std::nullopt;
    return r.get_header_value(name);
  };
  // Anthropic clients send the key as `x-api-key: KEY`: it counts as `Authorization: Bearer KEY`
  // when no Authorization header is present.
  std::optional<std::string> authorization = get("Authorization");
  if (!authorization)
    if (std::optional<std::string> x = get("x-api-key")) authorization = "Bearer " + *x;
  return RequestHead{r.method,
                     r.path,
                     get("Host"),
                     get("Origin"),
                     authorization,
                     get("Content-Type"),
                     get("Access-Control-Request-Method"),
                     get("Access-Control-Request-Headers")};
}

struct PolicyResult {
  std::optional<ApiError> error;  ///< refuse the request with this (403, 401, 415)
  bool preflight = false;         ///< an accepted CORS preflight: answer 204 with `headers`, run no handler
  /// Headers to add to the response, error or not (CORS headers for a --cors-origin).
  std::vector<std::pair<std::string, std::string>> headers;
};

/// The one entry point: checks Host, Origin, the key and the Content-Type, in that order.
PolicyResult check_request_policy(const PolicyConfig& cfg, const RequestHead& req);

/// Whether `authorization` ("Bearer KEY") carries one of `keys` (constant time per key).
bool bearer_matches(const std::vector<KeyDigest>& keys, const std::optional<std::string>& authorization);

/// The prefix-cache partition of a request (0 = the shared partition): with Key and two or more
/// API keys, derived from the bearer key's digest; with User, also from the `user` field. Never
/// the key itself: a hash of its SHA-256 digest.
uint64_t cache_partition(const PolicyConfig& cfg, const std::optional<std::string>& authorization,
                         const std::string& user);

}  // namespace k3::server
