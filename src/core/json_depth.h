// A bound on the nesting depth of JSON text, checked before the text is parsed.
//
// nlohmann::json parses iteratively, but copying, comparing and printing a value (dump(), k3's
// Python-style printers, the chat renderer) recurse once per level of arrays/objects: a value
// nested tens of thousands of levels deep overflows the stack and kills the process. Every k3
// reader of JSON (HTTP request bodies, JSON text held in string fields such as tool-call
// "arguments", model output, state-file and prefix-cache headers, config.json,
// tokenizer_config.json, safetensors headers) refuses text nested deeper than kMaxJsonDepth
// before parsing it, so every value in the process is at most that deep.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace k3 {

/// Deepest nesting of arrays and objects k3 accepts in any JSON text: `[]` and `{}` are depth 1,
/// `[[1]]` depth 2; a scalar alone is depth 0.
inline constexpr int kMaxJsonDepth = 64;

/// What scan_json_depth found.
struct JsonDepthScan {
  int depth = 0;           ///< deepest nesting seen, counting stops at limit + 1
  bool exceeded = false;   ///< depth > limit
  std::size_t offset = 0;  ///< when exceeded: byte offset of the '[' or '{' that went past the limit
  std::string top_key;     ///< when exceeded inside a top-level object: the key (raw, escapes kept,
                           ///< at most 64 bytes) whose value went past the limit; else ""
};

/// Scans JSON text for the nesting depth of '[' and '{' outside strings (backslash escapes
/// inside strings honoured), stopping at the first bracket past `limit`. Linear time, no
/// allocation beyond top_key; never throws. Malformed text is scanned all the same (unmatched
/// closers never make the depth negative), so the result bounds what any JSON parser would
/// build from the text.
JsonDepthScan scan_json_depth(std::string_view text, int limit = kMaxJsonDepth);

/// True when `text` nests at most `limit` levels.
inline bool json_depth_within(std::string_view text, int limit = kMaxJsonDepth) {
  return !scan_json_depth(text, limit).exceeded;
}

/// The error text for JSON nested too deep: "JSON nested deeper than 64 levels" plus, when the
/// scan named a top-level key, " (in the value of key \"extra\")".
std::string json_depth_message(const JsonDepthScan& scan, int limit = kMaxJsonDepth);

/// Throws k3::Error("<what>: JSON nested deeper than 64 levels[ (in the value of key "K")]")
/// when `text` nests deeper than `limit`. `what` names the file, field or flag the text came from.
void check_json_depth(std::string_view text, const std::string& what, int limit = kMaxJsonDepth);

}  // namespace k3
