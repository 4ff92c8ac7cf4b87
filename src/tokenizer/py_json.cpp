// Python-compatible JSON serialization.
#include "tokenizer/py_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/json_depth.h"

namespace k3::tok {
namespace {

void dump_string(const std::string& s, std::string& out) {
  out.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

// Python float.__repr__: shortest round-trip digits; fixed when -4 <= exp10 < 16, else
// scientific with a sign and at least two exponent digits.
void dump_float(double d, std::string& out) {
  if (!std::isfinite(d)) throw Error("JSON: NaN/Infinity cannot be rendered (Python would write NaN/Infinity)");
  if (d == 0) {
    out += std::signbit(d) ? "-0.0" : "0.0";
    return;
  }
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // e.g. "-1.2345e+02"
  const std::size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp10 = std::stoi(sci.substr(e + 1));
  bool neg = false;
  if (!mant.empty() && mant[0] == '-') {
    neg = true;
    mant.erase(0, 1);
  }
  std::string digits;
  for (char c : mant)
    if (c != '.') digits.push_back(c);
  if (neg) out.push_back('-');
  if (exp10 >= -4 && exp10 < 16) {
    const int n = static_cast<int>(digits.size());
    if (exp10 < 0) {
      out += "0.";
      out.append(static_cast<std::size_t>(-exp10 - 1), '0');
      out += digits;
    } else if (exp10 + 1 >= n) {
      out += digits;
      out.append(static_cast<std::size_t>(exp10 + 1 - n), '0');
      out += ".0";
    } else {
      out += digits.substr(0, static_cast<std::size_t>(exp10 + 1));
      out.push_back('.');
      out += digits.substr(static_cast<std::size_t>(exp10 + 1));
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) {
      out.push_back('.');
      out += digits.substr(1);
    }
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += eb;
  }
}

// depth: arrays/objects around v. Recursion is bounded by kMaxJsonDepth.
void dump(const nlohmann::ordered_json& v, bool sort_keys, bool compact, std::string& out, int depth) {
  using T = nlohmann::ordered_json::value_t;
  if ((v.is_array() || v.is_object()) && depth >= kMaxJsonDepth)
    throw Error("JSON: a value nested deeper than " + std::to_string(kMaxJsonDepth) + " levels cannot be rendered");
  switch (v.type()) {
    case T::null: out += "null"; return;
    case T::boolean: out += v.get<bool>() ? "true" : "false"; return;
    case T::number_integer: out += std::to_string(v.get<int64_t>()); return;
    case T::number_unsigned: out += std::to_string(v.get<uint64_t>()); return;
    case T::number_float: dump_float(v.get<double>(), out); return;
    case T::string: dump_string(v.get_ref<const std::string&>(), out); return;
    case T::array: {
      out.push_back('[');
      bool first = true;
      for (const auto& e : v) {
        if (!first) out += compact ? "," : ", ";
        first = false;
        dump(e, sort_keys, compact, out, depth + 1);
      }
      out.push_back(']');
      return;
    }
    case T::object: {
      std::vector<std::pair<const std::string*, const nlohmann::ordered_json*>> items;
      for (auto it = v.begin(); it != v.end(); ++it) items.emplace_back(&it.key(), &it.value());
      if (sort_keys)
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return *a.first < *b.first; });
      out.push_back('{');
      bool first = true;
      for (const auto& [k, val] : items) {
        if (!first) out += compact ? "," : ", ";
        first = false;
        dump_string(*k, out);
        out += compact ? ":" : ": ";
        dump(*val, sort_keys, compact, out, depth + 1);
      }
      out.push_back('}');
      return;
    }
    default: throw Error("JSON: cannot render a binary/discarded value");
  }
}

}  // namespace

std::string py_json_dumps(const nlohmann::ordered_json& v, bool sort_keys, bool compact) {
  std::string out;
  dump(v, sort_keys, compact, out, 0);
  return out;
}

}  // namespace k3::tok
