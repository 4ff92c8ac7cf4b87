#include "web_page.h"

#include <httplib.h>

#include "web_assets.h"

namespace k3::server {
namespace {

// cpp-httplib matches route patterns without '/:' as std::regex: a file name's '.' must be escaped.
std::string exact_path_pattern(std::string_view path) {
  std::string p;
  for (char c : path) {
    const bool plain =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '/' || c == '_' || c == '-';
    if (!plain) p += '\\';
    p += c;
  }
  return p;
}

}  // namespace

const char* const kWebPageCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; font-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

void add_web_page_routes(httplib::Server& s) {
  for (const WebAsset& a : web_assets()) {
    s.Get(exact_path_pattern(a.path), [a](const httplib::Request&, httplib::Response& res) {
      res.set_header("Content-Security-Policy", kWebPageCsp);
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_header("Referrer-Policy", "no-referrer");
      res.set_header("Cache-Control", "no-cache");
      res.set_content(a.body.data(), a.body.size(), std::string(a.content_type));
    });
  }
}

bool is_web_page_path(std::string_view path) {
  for (const WebAsset& a : web_assets())
    if (a.path == path) return true;
  return false;
}

}  // namespace k3::server
