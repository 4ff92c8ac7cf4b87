// Python json.dumps(..., ensure_ascii=False) for the K3 chat renderer, which embeds JSON in
// prompts exactly as encoding_k3.py does (spec tokenizer.md §4.2).
#pragma once
#include <nlohmann/json.hpp>

#include <string>

namespace k3::tok {

/// Serializes like Python's json.dumps(v, ensure_ascii=False, sort_keys=sort_keys,
/// separators=(',', ':') if compact else (', ', ': ')). Keys keep insertion order unless
/// sort_keys (sorted by code point = UTF-8 byte order). Floats use Python's repr (shortest
/// round-trip; '1.0', '1e-05', '1e+16'). Errors: k3::Error for NaN/Infinity, binary values and
/// arrays/objects nested deeper than kMaxJsonDepth (core/json_depth.h; the printer recurses per level).
std::string py_json_dumps(const nlohmann::ordered_json& v, bool sort_keys, bool compact);

}  // namespace k3::tok
