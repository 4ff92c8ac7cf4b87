// The chat page's files (index.html, app.js, app.css in this folder), embedded into the binary
// at build time by embed.cmake (the definition is the generated web_assets.cpp).
#pragma once
#include <string_view>
#include <vector>

namespace k3::server {

struct WebAsset {
  std::string_view path;          ///< URL path: "/" for index.html, "/<file name>" otherwise
  std::string_view content_type;  ///< e.g. "text/html; charset=utf-8"
  std::string_view body;          ///< the file's bytes, unchanged
};

/// Every embedded file of the page, in the order of K3_WEB_FILES (web.cmake).
const std::vector<WebAsset>& web_assets();

}  // namespace k3::server
