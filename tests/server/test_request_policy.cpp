// k3::server request policy (request_policy.h) without a socket: Host (DNS rebinding), Origin
// and CORS, API and metrics keys, Content-Type, key files, cache partitions.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "request_policy.h"

namespace {

using k3::server::CachePartition;
using k3::server::PolicyConfig;
using k3::server::PolicyResult;
using k3::server::RequestHead;

PolicyConfig policy(std::vector<std::string> keys = {}, std::vector<std::string> metrics = {},
                    std::vector<std::string> hosts = {}, std::vector<std::string> origins = {},
                    CachePartition part = CachePartition::None, std::string bound = "127.0.0.1") {
  return k3::server::make_policy(keys, metrics, bound, hosts, origins, part);
}

RequestHead head(std::string method, std::string path, std::optional<std::string> host = "127.0.0.1:8080") {
  RequestHead h;
  h.method = std::move(method);
  h.path = std::move(path);
  h.host = std::move(host);
  return h;
}

int status(const PolicyResult& r) { return r.error ? r.error->status() : 0; }

std::string header(const PolicyResult& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return "";
}

TEST(RequestPolicy, HostRebindingIsRefusedLoopbackNamesAndAddressesPass) {
  const PolicyConfig p = policy();
  for (const char* ok : {"127.0.0.1:8080", "localhost:8080", "LOCALHOST", "[::1]:8080", "app.localhost:9",
                         "192.168.1.5:8080", "10.0.0.1", "localhost:9000"})
    EXPECT_EQ(status(k3::server::check_request_policy(p, head("GET", "/v1/models", std::string(ok)))), 0) << ok;
  EXPECT_EQ(status(k3::server::check_request_policy(p, head("GET", "/v1/models", std::nullopt))), 0);
  const PolicyResult r = k3::server::check_request_policy(p, head("POST", "/v1/completions", "evil.example:8080"));
  ASSERT_EQ(status(r), 403);
  EXPECT_NE(std::string(r.error->what()).find("--allowed-host evil.example"), std::string::npos) << r.error->what();
  EXPECT_EQ(r.error->type(), "PermissionDeniedError");
  EXPECT_EQ(status(k3::server::check_request_policy(p, head("GET", "/", "evil.example"))), 403);
  EXPECT_EQ(status(k3::server::check_request_policy(p, head("GET", "/", "a b"))), 400);
  EXPECT_EQ(status(k3::server::check_request_policy(p, head("GET", "/", "x:notaport"))), 400);
  // --allowed-host and --host names pass; * lets everything through.
  const PolicyConfig named = policy({}, {}, {"GPU-Box"}, {}, CachePartition::None, "my.lan");
  EXPECT_EQ(status(k3::server::check_request_policy(named, head("GET", "/v1/models", "gpu-box:8080"))), 0);
  EXPECT_EQ(status(k3::server::check_request_policy(named, head("GET", "/v1/models", "my.lan:8080"))), 0);
  EXPECT_EQ(status(k3::server::check_request_policy(named, head("GET", "/v1/models", "evil.example"))), 403);
  const PolicyConfig any = policy({}, {}, {"*"});
  EXPECT_EQ(status(k3::server::check_request_policy(any, head("GET", "/v1/models", "evil.example"))), 0);
  EXPECT_THROW(policy({}, {}, {"gpu-box:8080"}), k3::Error);
  EXPECT_THROW(policy({}, {}, {""}), k3::Error);
}

TEST(RequestPolicy, CrossOriginRefusedSameOriginAndListedOriginsPass) {
  const PolicyConfig p = policy();
  RequestHead h = head("POST", "/v1/chat/completions");
  h.origin = "http://127.0.0.1:8080";  // the chat page
  EXPECT_EQ(status(k3::server::check_request_policy(p, h)), 0);
  EXPECT_TRUE(k3::server::check_request_policy(p, h).headers.empty());
  h.origin = "https://evil.example";
  PolicyResult r = k3::server::check_request_policy(p, h);
  ASSERT_EQ(status(r), 403);
  EXPECT_NE(std::string(r.error->what()).find("--cors-origin https://evil.example"), std::string::npos);
  h.origin = "null";
  EXPECT_EQ(status(k3::server::check_request_policy(p, h)), 403);
  h.origin = "http://127.0.0.1:9999";  // same host, another port: another origin
  EXPECT_EQ(status(k3::server::check_request_policy(p, h)), 403);

  const PolicyConfig cors = policy({"k"}, {}, {}, {"https://App.Example/"});
  h.origin = "https://app.example";
  h.authorization = "Bearer k";
  r = k3::server::check_request_policy(cors, h);
  EXPECT_EQ(status(r), 0);
  EXPECT_EQ(header(r, "Access-Control-Allow-Origin"), "https://app.example");
  EXPECT_EQ(header(r, "Vary"), "Origin");
  h.authorization.reset();  // the CORS headers come with the refusal too (the page can read it)
  r = k3::server::check_request_policy(cors, h);
  EXPECT_EQ(status(r), 401);
  EXPECT_EQ(header(r, "Access-Control-Allow-Origin"), "https://app.example");
  h.origin = "https://other.example";
  EXPECT_EQ(status(k3::server::check_request_policy(cors, h)), 403);
  const PolicyConfig star = policy({}, {}, {}, {"*"});
  EXPECT_EQ(status(k3::server::check_request_policy(star, h)), 0);
  EXPECT_THROW(policy({}, {}, {}, {"app.example"}), k3::Error);
  EXPECT_THROW(policy({}, {}, {}, {"https://app.example/path"}), k3::Error);
}

TEST(RequestPolicy, PreflightOfAListedOriginNeedsNoKey) {
  const PolicyConfig p = policy({"k"}, {}, {}, {"https://app.example"});
  RequestHead h = head("OPTIONS", "/v1/chat/completions");
  h.origin = "https://app.example";
  h.acr_method = "POST";
  h.acr_headers = "authorization, content-type, x-stainless-os\r\nX-Injected: 1";
  const PolicyResult r = k3::server::check_request_policy(p, h);
  EXPECT_EQ(status(r), 0);
  EXPECT_TRUE(r.preflight);
  EXPECT_EQ(header(r, "Access-Control-Allow-Origin"), "https://app.example");
  EXPECT_EQ(header(r, "Access-Control-Allow-Methods"), "GET, POST, OPTIONS");
  EXPECT_EQ(header(r, "Access-Control-Allow-Headers").find('\n'), std::string::npos);
  EXPECT_EQ(header(r, "Access-Control-Allow-Headers").find(':'), std::string::npos);
  h.origin = "https://evil.example";
  const PolicyResult bad = k3::server::check_request_policy(p, h);
  EXPECT_EQ(status(bad), 403);
  EXPECT_FALSE(bad.preflight);
}

TEST(RequestPolicy, KeysAreCheckedOnApiPathsMetricsHasItsOwn) {
  const PolicyConfig p = policy({"alpha", "beta"});
  RequestHead h = head("GET", "/v1/models");
  EXPECT_EQ(status(k3::server::check_request_policy(p, h)), 401);
  EXPECT_NE(std::string(k3::server::check_request_policy(p, h).error->what()).find("Missing API key"),
            std::string::npos);
  for (const char* a : {"Bearer alpha", "Bearer beta", "bearer beta"}) {
    h.authorization = a;
    EXPECT_EQ(status(k3::server::check_request_policy(p, h)), 0) << a;
  }
  for (const char* a : {"Bearer alph", "Bearer alphaa", "Bearer ", "alpha", "Basic alpha"}) {
    h.authorization = a;
    const PolicyResult r = k3::server::check_request_policy(p, h);
    ASSERT_EQ(status(r), 401) << a;
    EXPECT_EQ(std::string(r.error->what()), "Invalid API key");
  }
  for (const char* open : {"/health", "/"})
    EXPECT_EQ(status(k3::server::check_request_policy(p, head("GET", open))), 0);
  // /metrics: an API key when keys are set and no metrics key
  EXPECT_EQ(status(k3::server::check_request_policy(p, head("GET", "/metrics"))), 401);
  RequestHead m = head("GET", "/metrics");
  m.authorization = "Bearer beta";
  EXPECT_EQ(status(k3::server::check_request_policy(p, m)), 0);
  // --metrics-key: only that key opens /metrics; the API keys still open the API
  const PolicyConfig pm = policy({"alpha"}, {"scrape"});
  EXPECT_EQ(status(k3::server::check_request_policy(pm, m)), 401);
  m.authorization = "Bearer alpha";
  EXPECT_EQ(status(k3::server::check_request_policy(pm, m)), 401);
  m.authorization = "Bearer scrape";
  EXPECT_EQ(status(k3::server::check_request_policy(pm, m)), 0);
  h.authorization = "Bearer scrape";
  EXPECT_EQ(status(k3::server::check_request_policy(pm, h)), 401);
  // a metrics key alone: the API is open, /metrics is not
  const PolicyConfig only_metrics = policy({}, {"scrape"});
  EXPECT_EQ(status(k3::server::check_request_policy(only_metrics, head("GET", "/v1/models"))), 0);
  EXPECT_EQ(status(k3::server::check_request_policy(only_metrics, head("GET", "/metrics"))), 401);
  // no keys at all: everything open
  EXPECT_EQ(status(k3::server::check_request_policy(policy(), head("GET", "/metrics"))), 0);
  EXPECT_THROW(policy({""}), k3::Error);
}

TEST(RequestPolicy, JsonEndpointsRefuseOtherContentTypesWith415) {
  const PolicyConfig p = policy();
  RequestHead h = head("POST", "/v1/completions");
  EXPECT_EQ(status(k3::server::check_request_policy(p, h)), 0);  // no Content-Type: a non-browser client
  for (const char* ok : {"application/json", "Application/JSON; charset=UTF-8", "application/json;charset=\"utf-8\""}) {
    h.content_type = ok;
    EXPECT_EQ(status(k3::server::check_request_policy(p, h)), 0) << ok;
  }
  for (const char* bad : {"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                          "multipart/form-data; boundary=x", "application/json; charset=latin1", "application/jsonx"}) {
    h.content_type = bad;
    const PolicyResult r = k3::server::check_request_policy(p, h);
    ASSERT_EQ(status(r), 415) << bad;
    EXPECT_EQ(r.error->param(), "Content-Type");
    EXPECT_NE(std::string(r.error->what()).find("application/json"), std::string::npos);
  }
  RequestHead slots = head("POST", "/slots/0");
  slots.content_type = "text/plain";
  EXPECT_EQ(status(k3::server::check_request_policy(p, slots)), 415);
}

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& text, mode_t mode = 0600) {
    char t[] = "/tmp/k3keys-XXXXXX";
    const int fd = ::mkstemp(t);
    path = t;
    std::ofstream(path) << text;
    ::close(fd);
    ::chmod(path.c_str(), mode);
  }
  ~TempFile() { std::filesystem::remove(path); }
};

TEST(RequestPolicy, KeyFileOneKeyPerLineAndClearErrors) {
  TempFile good("# tenants\n  alpha  \n\nbeta\r\n");
  EXPECT_EQ(k3::server::read_key_file("--api-key-file", good.path), (std::vector<std::string>{"alpha", "beta"}));
  auto message = [](const std::string& path) {
    try {
      k3::server::read_key_file("--api-key-file", path);
    } catch (const k3::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  TempFile empty("# nothing\n\n");
  EXPECT_NE(message(empty.path).find("--api-key-file: '" + empty.path + "' holds no key"), std::string::npos);
  EXPECT_NE(message("/nonexistent/keys").find("--api-key-file: cannot read '/nonexistent/keys'"), std::string::npos);
  EXPECT_NE(message("/tmp").find("is a directory"), std::string::npos);
  TempFile writable("alpha\n", 0666);
  EXPECT_NE(message(writable.path).find("writable by other users"), std::string::npos);
  TempFile readable("alpha\n", 0644);  // accepted (with a warning)
  EXPECT_EQ(k3::server::read_key_file("--api-key-file", readable.path), std::vector<std::string>{"alpha"});
}

TEST(RequestPolicy, CachePartitions) {
  EXPECT_EQ(k3::server::parse_cache_partition("user"), CachePartition::User);
  EXPECT_THROW(k3::server::parse_cache_partition("tenant"), k3::Error);
  const PolicyConfig none = policy({"a", "b"}, {}, {}, {}, CachePartition::None);
  EXPECT_EQ(k3::server::cache_partition(none, "Bearer a", "u"), 0u);
  const PolicyConfig key = policy({"a", "b"}, {}, {}, {}, CachePartition::Key);
  const uint64_t pa = k3::server::cache_partition(key, "Bearer a", ""),
                 pb = k3::server::cache_partition(key, "Bearer b", "");
  EXPECT_NE(pa, 0u);
  EXPECT_NE(pb, 0u);
  EXPECT_NE(pa, pb);
  EXPECT_EQ(k3::server::cache_partition(key, "Bearer a", "someone"), pa);  // key mode ignores `user`
  // one key: one partition (the shared one)
  EXPECT_EQ(k3::server::cache_partition(policy({"a"}, {}, {}, {}, CachePartition::Key), "Bearer a", ""), 0u);
  const PolicyConfig user = policy({}, {}, {}, {}, CachePartition::User);
  const uint64_t u1 = k3::server::cache_partition(user, std::nullopt, "alice");
  EXPECT_NE(u1, 0u);
  EXPECT_NE(u1, k3::server::cache_partition(user, std::nullopt, "bob"));
  EXPECT_EQ(u1, k3::server::cache_partition(user, std::nullopt, "alice"));
  EXPECT_EQ(k3::server::cache_partition(user, std::nullopt, ""), 0u);
  const PolicyConfig user_keys = policy({"a", "b"}, {}, {}, {}, CachePartition::User);
  EXPECT_NE(k3::server::cache_partition(user_keys, "Bearer a", "alice"),
            k3::server::cache_partition(user_keys, "Bearer b", "alice"));
}

}  // namespace
