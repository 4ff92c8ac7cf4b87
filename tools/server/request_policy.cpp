// Request policy of `k3 serve`: see request_policy.h.
#include "request_policy.h"

#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "web_page.h"

namespace k3::server {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() <= 5 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// Splits "host[:port]" / "[v6][:port]" into the host name (lower case, IPv6 with brackets);
/// nullopt when malformed.
std::optional<std::string> host_name(const std::string& authority) {
  if (authority.empty()) return std::nullopt;
  if (authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos) return std::nullopt;
    const std::string rest = authority.substr(close + 1);
    if (!rest.empty() && !(rest[0] == ':' && all_digits(rest.substr(1)))) return std::nullopt;
    return lower(authority.substr(0, close + 1));
  }
  const size_t colon = authority.find(':');
  std::string name = authority.substr(0, colon);
  if (colon != std::string::npos && !all_digits(authority.substr(colon + 1))) return std::nullopt;
  if (name.empty()) return std::nullopt;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) return std::nullopt;
  return lower(name);
}

bool is_ip_literal(const std::string& name) {
  unsigned char buf[16];
  if (name.size() > 2 && name.front() == '[' && name.back() == ']') {
    std::string inner = name.substr(1, name.size() - 2);
    const size_t zone = inner.find('%');
    if (zone != std::string::npos) inner.resize(zone);
    return inet_pton(AF_INET6, inner.c_str(), buf) == 1;
  }
  return inet_pton(AF_INET, name.c_str(), buf) == 1;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// The --host value as it appears in a Host header's name part (IPv6 in brackets).
std::string bound_name(const std::string& host) {
  std::string h = lower(host);
  if (h.find(':') != std::string::npos && h.front() != '[') h = "[" + h + "]";
  return h;
}

bool host_allowed(const PolicyConfig& cfg, const std::string& name) {
  if (is_ip_literal(name) || name == "localhost" || ends_with(name, ".localhost")) return true;
  if (!cfg.bound_host.empty() && name == bound_name(cfg.bound_host)) return true;
  for (const std::string& a : cfg.allowed_hosts)
    if (a == "*" || a == name) return true;
  return false;
}

/// "scheme://host[:port]" lower-cased without a trailing '/', or "null"; nullopt when it is
/// neither.
std::optional<std::string> normalize_origin(const std::string& origin) {
  std::string o = lower(trim(origin));
  if (o == "null") return o;
  if (!o.empty() && o.back() == '/') o.pop_back();
  const size_t sep = o.find("://");
  if (sep == std::string::npos || sep == 0) return std::nullopt;
  for (size_t i = 0; i < sep; ++i)
    if (!(std::isalnum(static_cast<unsigned char>(o[i])) || o[i] == '+' || o[i] == '-' || o[i] == '.'))
      return std::nullopt;
  const std::string authority = o.substr(sep + 3);
  if (authority.find('/') != std::string::npos || !host_name(authority)) return std::nullopt;
  return o;
}

enum class PathClass { Open, Metrics, Api };

PathClass classify(const std::string& path) {
  if (path == "/health" || is_web_page_path(path)) return PathClass::Open;
  if (path == "/metrics") return PathClass::Metrics;
  return PathClass::Api;
}

ApiError forbidden(const std::string& msg) { return ApiError(403, msg, "", "PermissionDeniedError"); }

/// Access-Control-Request-Headers reduced to header-name characters, commas and spaces.
std::string safe_header_list(const std::string& s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ',' || c == ' ') out += c;
  return trim(out);
}

uint64_t digest_u64(const unsigned char* d) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | d[i];
  return v;
}

}  // namespace

CachePartition parse_cache_partition(const std::string& s) {
  if (s == "none") return CachePartition::None;
  if (s == "key") return CachePartition::Key;
  if (s == "user") return CachePartition::User;
  throw Error("--cache-partition: expected none, key or user, found '" + s + "'");
}

const char* cache_partition_name(CachePartition p) {
  switch (p) {
    case CachePartition::None: return "none";
    case CachePartition::Key: return "key";
    case CachePartition::User: return "user";
  }
  return "none";
}

KeyDigest key_digest(const std::string& key) {
  KeyDigest d;
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), d.data());
  return d;
}

std::vector<std::string> read_key_file(const std::string& flag, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error(flag + ": cannot read '" + path + "': " + std::strerror(errno));
  if (S_ISDIR(st.st_mode))
    throw Error(flag + ": '" + path + "' is a directory (expected a file with one key per line)");
  if (st.st_mode & S_IWOTH)
    throw Error(flag + ": '" + path + "' is writable by other users (anyone could add a key): chmod o-w,go-r '" + path +
                "'");
  std::ifstream f(path);
  if (!f) throw Error(flag + ": cannot read '" + path + "': " + std::strerror(errno));
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(f, line)) {
    const std::string k = trim(line);
    if (k.empty() || k[0] == '#') continue;
    keys.push_back(k);
  }
  if (f.bad()) throw Error(flag + ": cannot read '" + path + "': read error");
  if (keys.empty())
    throw Error(flag + ": '" + path +
                "' holds no key (expected one key per line; blank lines and # comments are skipped)");
  if (st.st_mode & S_IROTH)
    std::fprintf(stderr, "k3 serve: warning: %s '%s' is readable by other users (chmod go-r it)\n", flag.c_str(),
                 path.c_str());
  return keys;
}

PolicyConfig make_policy(const std::vector<std::string>& api_keys, const std::vector<std::string>& metrics_keys,
                         const std::string& bound_host, const std::vector<std::string>& allowed_hosts,
                         const std::vector<std::string>& cors_origins, CachePartition partition) {
  PolicyConfig c;
  for (const std::string& k : api_keys) {
    if (k.empty()) throw Error("--api-key: empty key (expected a non-empty string)");
    c.api_keys.push_back(key_digest(k));
  }
  for (const std::string& k : metrics_keys) {
    if (k.empty()) throw Error("--metrics-key: empty key (expected a non-empty string)");
    c.metrics_keys.push_back(key_digest(k));
  }
  c.bound_host = bound_host;
  for (const std::string& h : allowed_hosts) {
    const std::string v = lower(trim(h));
    if (v == "*") {
      c.allowed_hosts.push_back(v);
      continue;
    }
    const std::optional<std::string> name = host_name(v);
    if (!name || (v.find(':') != std::string::npos && v.front() != '['))
      throw Error("--allowed-host: expected a host name without port (or *), found '" + h + "'");
    c.allowed_hosts.push_back(*name);
  }
  for (const std::string& o : cors_origins) {
    if (trim(o) == "*") {
      c.cors_origins.push_back("*");
      continue;
    }
    const std::optional<std::string> n = normalize_origin(o);
    if (!n) throw Error("--cors-origin: expected *, null or scheme://host[:port] (no path), found '" + o + "'");
    c.cors_origins.push_back(*n);
  }
  c.partition = partition;
  return c;
}

bool bearer_matches(const std::vector<KeyDigest>& keys, const std::optional<std::string>& authorization) {
  if (!authorization || authorization->size() < 7 || lower(authorization->substr(0, 7)) != "bearer ") return false;
  const KeyDigest given = key_digest(trim(authorization->substr(7)));
  bool ok = false;
  for (const KeyDigest& k : keys) ok |= CRYPTO_memcmp(given.data(), k.data(), given.size()) == 0;
  return ok;
}

PolicyResult check_request_policy(const PolicyConfig& cfg, const RequestHead& req) {
  PolicyResult r;
  // 1. Host.
  if (req.host) {
    const std::optional<std::string> name = host_name(trim(*req.host));
    if (!name) {
      r.error = ApiError(400, "Malformed Host header: '" + *req.host + "'", "Host");
      return r;
    }
    if (!host_allowed(cfg, *name)) {
      r.error = forbidden("Host '" + *req.host +
                          "' is not allowed (DNS-rebinding protection): use the server's address, localhost, "
                          "or start k3 serve with --allowed-host " +
                          *name);
      return r;
    }
  }
  // 2. Origin.
  if (req.origin) {
    const std::optional<std::string> o = normalize_origin(*req.origin);
    bool same = false, listed = false;
    if (o && req.host && *o != "null") {
      const size_t sep = o->find("://");
      const std::string scheme = o->substr(0, sep);
      same = (scheme == "http" || scheme == "https") && o->substr(sep + 3) == lower(trim(*req.host));
    }
    if (!same && o)
      for (const std::string& a : cfg.cors_origins) listed = listed || a == "*" || a == *o;
    if (!same && !listed) {
      r.error = forbidden("Cross-origin request from Origin '" + *req.origin +
                          "' refused: start k3 serve with --cors-origin " + (o ? *o : std::string("ORIGIN")) +
                          " to allow that site");
      return r;
    }
    if (listed) {
      r.headers.emplace_back("Access-Control-Allow-Origin", trim(*req.origin));
      r.headers.emplace_back("Vary", "Origin");
      if (req.method == "OPTIONS" && req.acr_method) {
        r.preflight = true;
        r.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        const std::string hs = req.acr_headers ? safe_header_list(*req.acr_headers) : "";
        r.headers.emplace_back("Access-Control-Allow-Headers", hs.empty() ? "Authorization, Content-Type" : hs);
        r.headers.emplace_back("Access-Control-Max-Age", "600");
        return r;
      }
    }
  }
  // 3. Key.
  const PathClass cls = classify(req.path);
  if (cls == PathClass::Metrics && !cfg.metrics_keys.empty()) {
    if (!bearer_matches(cfg.metrics_keys, req.authorization))
      r.error = ApiError(401,
                         req.authorization ? "Invalid metrics key"
                                           : "Missing metrics key (Authorization: Bearer KEY of --metrics-key)",
                         "", "AuthenticationError");
  } else if (cls != PathClass::Open && !cfg.api_keys.empty()) {
    if (!bearer_matches(cfg.api_keys, req.authorization))
      r.error = ApiError(401, req.authorization ? "Invalid API key" : "Missing API key (Authorization: Bearer KEY)", "",
                         "AuthenticationError");
  }
  if (r.error) return r;
  // 4. Content-Type of a JSON body.
  if (cls == PathClass::Api && req.method == "POST" && req.content_type) {
    const std::string ct = lower(*req.content_type);
    const size_t semi = ct.find(';');
    bool ok = trim(ct.substr(0, semi)) == "application/json";
    for (size_t p = semi; ok && p != std::string::npos;) {
      const size_t next = ct.find(';', p + 1);
      const std::string param = trim(ct.substr(p + 1, next == std::string::npos ? std::string::npos : next - p - 1));
      const size_t eq = param.find('=');
      if (eq != std::string::npos && trim(param.substr(0, eq)) == "charset") {
        std::string v = trim(param.substr(eq + 1));
        if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
        ok = v == "utf-8" || v == "utf8";
      }
      p = next;
    }
    if (!ok)
      r.error = ApiError(
          415,
          "Content-Type: expected application/json (optionally with charset=utf-8), found '" + *req.content_type + "'",
          "Content-Type", "UnsupportedMediaTypeError");
  }
  return r;
}

uint64_t cache_partition(const PolicyConfig& cfg, const std::optional<std::string>& authorization,
                         const std::string& user) {
  if (cfg.partition == CachePartition::None) return 0;
  // The key part: which configured key the request carries (only when there is a choice).
  std::string material;
  if (cfg.api_keys.size() >= 2 && authorization && authorization->size() >= 7 &&
      lower(authorization->substr(0, 7)) == "bearer ") {
    const KeyDigest d = key_digest(trim(authorization->substr(7)));
    material.append("key:").append(reinterpret_cast<const char*>(d.data()), d.size());
  }
  if (cfg.partition == CachePartition::User && !user.empty()) {
    const KeyDigest u = key_digest(user);
    material.append("user:").append(reinterpret_cast<const char*>(u.data()), u.size());
  }
  if (material.empty()) return 0;
  const KeyDigest h = key_digest("k3-cache-partition\n" + material);
  const uint64_t v = digest_u64(h.data());
  return v == 0 ? 1 : v;
}

}  // namespace k3::server
