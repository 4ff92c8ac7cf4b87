#include "core/json_depth.h"

#include "core/error.h"

namespace k3 {

JsonDepthScan scan_json_depth(std::string_view text, int limit) {
  JsonDepthScan r;
  int depth = 0;
  bool in_string = false, escaped = false;
  std::size_t string_start = 0;
  std::string_view last_string;  // the most recent string closed at depth 1
  std::string_view key;          // the current key of the top-level object
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') {
        in_string = false;
        if (depth == 1) last_string = text.substr(string_start, i - string_start);
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        string_start = i + 1;
        break;
      case ':':
        if (depth == 1) key = last_string;
        break;
      case '[':
      case '{':
        ++depth;
        if (depth > r.depth) r.depth = depth;
        if (depth > limit) {
          r.exceeded = true;
          r.offset = i;
          r.top_key = std::string(key.substr(0, 64));
          return r;
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        if (depth == 1) key = {};  // the value of the current top-level key ended
        break;
      case ',':
        if (depth == 1) key = {};
        break;
      default: break;
    }
  }
  return r;
}

std::string json_depth_message(const JsonDepthScan& scan, int limit) {
  std::string m = "JSON nested deeper than " + std::to_string(limit) + " levels";
  if (!scan.top_key.empty()) m += " (in the value of key \"" + scan.top_key + "\")";
  return m;
}

void check_json_depth(std::string_view text, const std::string& what, int limit) {
  const JsonDepthScan s = scan_json_depth(text, limit);
  if (s.exceeded) throw Error(what + ": " + json_depth_message(s, limit));
}

}  // namespace k3
