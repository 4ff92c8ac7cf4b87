// GET routes of the chat page: the embedded files of web_assets.h with their
// Content-Type and a Content-Security-Policy that lets the page talk to this server only.
#pragma once
#include <string>
#include <string_view>

namespace httplib {
class Server;
}

namespace k3::server {

/// The Content-Security-Policy of every page response: scripts, styles, fonts and fetches from
/// this origin only (no inline script, no external host), no frames, no plugins, no form posts.
/// No inline style either: KaTeX sets its layout through the style property of the elements it
/// creates (CSSOM), which style-src does not govern, so 'unsafe-inline' is not needed.
extern const char* const kWebPageCsp;

/// Registers GET (and HEAD) for each embedded file. These routes need no API key: the page
/// carries none; its key field sends the key as a Bearer header on the /v1 requests it makes.
void add_web_page_routes(httplib::Server& s);

/// True for the URL path of an embedded file ("/", "/app.js", ...), for the metrics label.
bool is_web_page_path(std::string_view path);

}  // namespace k3::server
