#include "io/json_util.h"

#include <unordered_set>
#include <vector>

#include "core/error.h"
#include "core/json_depth.h"

namespace k3 {

using nlohmann::json;

std::string json_type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    case json::value_t::number_float: return "float";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    default: return "other";
  }
}

namespace {

// DOM-building SAX handler that refuses duplicate keys. (nlohmann's parser_callback_t route is
// quadratic in the object size in 3.11: every inner end_object rescans its parent.)
class DupCheckDomParser : public nlohmann::detail::json_sax_dom_parser<json> {
  using Base = nlohmann::detail::json_sax_dom_parser<json>;

 public:
  DupCheckDomParser(json& root, const std::string& origin) : Base(root, true), origin_(origin) {}
  bool start_object(std::size_t n) {
    keys_.emplace_back();
    return Base::start_object(n);
  }
  bool end_object() {
    if (!keys_.empty()) keys_.pop_back();
    return Base::end_object();
  }
  bool key(json::string_t& k) {
    if (!keys_.empty() && !keys_.back().insert(k).second)
      throw Error(origin_ + ": duplicate key '" + k + "' in a JSON object (each key must appear once)");
    return Base::key(k);
  }

 private:
  const std::string& origin_;
  std::vector<std::unordered_set<std::string>> keys_;  // one key set per open object
};

}  // namespace

json parse_json_strict(std::string_view text, const std::string& origin) {
  check_json_depth(text, origin);
  json root;
  DupCheckDomParser sax(root, origin);
  try {
    json::sax_parse(text.begin(), text.end(), &sax, nlohmann::detail::input_format_t::json,
                    /*strict=*/true, /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    throw Error(origin + ": invalid JSON: " + e.what());
  }
  return root;
}

}  // namespace k3
