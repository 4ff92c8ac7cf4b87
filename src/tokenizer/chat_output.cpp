// K3 output parser: a small state machine over marker ids and the tag text between them.
#include "tokenizer/chat_output.h"

#include "core/error.h"
#include "core/json_depth.h"
#include "tokenizer/utf8.h"

namespace k3 {
namespace {

using OJ = nlohmann::ordered_json;

std::string unescape_attr(const std::string& v) {
  std::string o;
  for (std::size_t i = 0; i < v.size();) {
    if (v.compare(i, 6, "&quot;") == 0) {
      o.push_back('"');
      i += 6;
    } else if (v.compare(i, 5, "&amp;") == 0) {
      o.push_back('&');
      i += 5;
    } else o.push_back(v[i++]);
  }
  return o;
}

enum class Channel { kReasoning, kContent, kArgument, kJson, kNone };

}  // namespace

std::string K3Tag::attr(const std::string& k) const {
  for (const auto& [a, v] : attrs)
    if (a == k) return v;
  return {};
}

K3Tag parse_k3_tag(const std::string& s) {
  K3Tag t;
  std::size_t i = s.find(' ');
  t.name = s.substr(0, i);
  while (i != std::string::npos && i < s.size()) {
    while (i < s.size() && s[i] == ' ') ++i;
    const std::size_t eq = s.find("=\"", i);
    if (eq == std::string::npos) break;
    const std::size_t end = s.find('"', eq + 2);
    if (end == std::string::npos) break;
    t.attrs.emplace_back(s.substr(i, eq - i), unescape_attr(s.substr(eq + 2, end - eq - 2)));
    i = end + 1;
  }
  return t;
}

ParsedOutput parse_k3_output(const Tokenizer& tok, const std::vector<int32_t>& ids, bool prompt_opened_think) {
  ParsedOutput out;
  const int32_t open = tok.open_id(), close = tok.close_id(), sep = tok.sep_id();
  const int32_t eom = tok.end_of_msg_id(), eos = tok.eos_id();
  Channel ch = prompt_opened_think ? Channel::kReasoning : Channel::kContent;
  std::string reasoning, content, arg_value, arg_key, arg_type, json_raw;
  enum class Mode { kBody, kOpenTag, kCloseTag } mode = Mode::kBody;
  std::string tag_text;

  auto finish_argument = [&] {
    if (out.tool_calls.empty()) return;
    auto& call = out.tool_calls.back();
    const std::string v = tok::utf8_sanitize(arg_value);
    if (arg_type == "string" || !json_depth_within(v)) {
      call.arguments[arg_key] = v;  // too deep to hold as a value: kept as text, as unparsable text is
    } else {
      try {
        call.arguments[arg_key] = OJ::parse(v);
      } catch (const OJ::exception&) {
        call.arguments[arg_key] = v;
      }
    }
  };
  auto finish_json = [&] {
    if (out.tool_calls.empty()) return;
    auto& call = out.tool_calls.back();
    call.raw_arguments = tok::utf8_sanitize(json_raw);
    if (!json_depth_within(call.raw_arguments)) {
      call.arguments = nullptr;  // as for text that does not parse; raw_arguments keeps it
      return;
    }
    try {
      call.arguments = OJ::parse(call.raw_arguments);
    } catch (const OJ::exception&) {
      call.arguments = nullptr;
    }
  };

  for (std::size_t k = 0; k < ids.size(); ++k) {
    const int32_t id = ids[k];
    const std::string_view bytes = tok.token_bytes(id);  // range check
    out.n_consumed = k + 1;
    if (id == eom || id == eos) {
      out.stopped = true;
      out.stop_id = id;
      break;
    }
    if (id == open || id == close) {
      mode = id == open ? Mode::kOpenTag : Mode::kCloseTag;
      tag_text.clear();
      continue;
    }
    if (id == sep && mode != Mode::kBody) {
      const K3Tag t = parse_k3_tag(tok::utf8_sanitize(tag_text));
      if (mode == Mode::kOpenTag) {
        if (t.name == "think") ch = Channel::kReasoning;
        else if (t.name == "response") ch = Channel::kContent;
        else if (t.name == "tools") ch = Channel::kNone;
        else if (t.name == "call") {
          out.tool_calls.push_back({t.attr("tool"), OJ::object(), {}});
          ch = Channel::kNone;
        } else if (t.name == "argument") {
          arg_key = t.attr("key");
          arg_type = t.attr("type");
          arg_value.clear();
          ch = Channel::kArgument;
        } else if (t.name == "json") {
          json_raw.clear();
          ch = Channel::kJson;
        } else {
          ch = Channel::kNone;  // e.g. a stray "message" open
        }
      } else {
        if (t.name == "argument" && ch == Channel::kArgument) finish_argument();
        if (t.name == "json" && ch == Channel::kJson) finish_json();
        ch = Channel::kNone;
      }
      mode = Mode::kBody;
      continue;
    }
    if (mode != Mode::kBody) {
      tag_text.append(bytes);
      continue;
    }
    if (tok.is_special(id)) continue;  // stray markers and other specials carry no text
    switch (ch) {
      case Channel::kReasoning: reasoning.append(bytes); break;
      case Channel::kContent: content.append(bytes); break;
      case Channel::kArgument: arg_value.append(bytes); break;
      case Channel::kJson: json_raw.append(bytes); break;
      case Channel::kNone: break;
    }
  }
  // Truncated inside an argument or json block: keep what was generated.
  if (ch == Channel::kArgument) finish_argument();
  if (ch == Channel::kJson) finish_json();
  out.reasoning = tok::utf8_sanitize(reasoning);
  out.content = tok::utf8_sanitize(content);
  return out;
}

}  // namespace k3
