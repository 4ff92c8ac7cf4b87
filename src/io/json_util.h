// Strict JSON parsing for checkpoint metadata: nlohmann parse plus a duplicate-key check
// (nlohmann alone silently keeps the last duplicate), with k3::Error messages that name the
// origin (file) and the JSON path of the offending key.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace k3 {

/// Parses `text` as JSON. Throws k3::Error("<origin>: invalid JSON: ...") on a syntax error or
/// invalid UTF-8 and k3::Error("<origin>: duplicate key '<k>' ...") when an object repeats a key.
nlohmann::json parse_json_strict(std::string_view text, const std::string& origin);

/// Name of the JSON type of `j` for error messages ("string", "integer", "object", ...).
std::string json_type_name(const nlohmann::json& j);

}  // namespace k3
