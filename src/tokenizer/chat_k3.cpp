// K3 XTML renderer: segments built as encoding_k3.py does.
#include "tokenizer/chat_k3.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/json_depth.h"
#include "tokenizer/py_json.h"

namespace k3 {
namespace {

using OJ = nlohmann::ordered_json;

constexpr const char* kOpen = "<|open|>";
constexpr const char* kClose = "<|close|>";
constexpr const char* kSep = "<|sep|>";
constexpr const char* kEnd = "<|end_of_msg|>";

std::string escape_attr(const std::string& v) {
  std::string o;
  for (char c : v) {
    if (c == '&') o += "&amp;";
    else o.push_back(c);
  }
  std::string p;
  for (char c : o) {
    if (c == '"') p += "&quot;";
    else p.push_back(c);
  }
  return p;
}

class Builder {
 public:
  std::vector<ChatSegment> segs;
  const std::vector<ChatImage>* images = nullptr;
  std::size_t n_images = 0;  ///< image parts consumed so far
  void control(const char* s) { segs.push_back({s, true}); }
  void text(const std::string& s) {
    if (!s.empty()) segs.push_back({s, false});
  }
  void open(const std::string& tag, const std::vector<std::pair<std::string, std::string>>& attrs = {}) {
    control(kOpen);
    text(tag);
    for (const auto& [k, v] : attrs) text(" " + k + "=\"" + escape_attr(v) + "\"");
    control(kSep);
  }
  void close(const std::string& tag) {
    control(kClose);
    text(tag);
    control(kSep);
  }
  void system_note(const std::string& type, const std::string& body) {
    open("message", {{"role", "system"}, {"type", type}});
    text(body);
    close("message");
    control(kEnd);
  }
};

std::string where(std::size_t i, const std::string& key) {
  return "chat messages[" + std::to_string(i) + "]" + (key.empty() ? "" : "." + key);
}

// Appends content: a string, null, or a list of {"type":"text","text":...} parts (each its own
// text segment, as the reference does); in a user message, parts of type "image_url" or "image"
// become the media block of the next image (spec vision.md §6.3).
void add_content(Builder& b, const OJ& msg, std::size_t i, bool user = false) {
  auto it = msg.find("content");
  if (it == msg.end() || it->is_null()) return;
  if (it->is_string()) {
    b.text(it->get<std::string>());
    return;
  }
  if (!it->is_array())
    throw Error(where(i, "content") + ": expected a string, null or a list of parts, found " + it->type_name());
  std::size_t k = 0;
  for (const auto& part : *it) {
    const std::string w = where(i, "content[" + std::to_string(k++) + "]");
    if (part.is_string()) {
      b.text(part.get<std::string>());
      continue;
    }
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      throw Error(w + ": expected an object with a string \"type\"");
    const std::string type = part["type"];
    if (type == "image_url" || type == "image") {
      if (!user)
        throw Error(w + ": an image part is only allowed in a user message (K3's processor takes images from "
                        "user turns only)");
      const std::size_t k = b.n_images++;
      if (k >= b.images->size())
        throw Error(w + ": image part " + std::to_string(k + 1) + " of the conversation has no image (" +
                    std::to_string(b.images->size()) + " given)");
      const ChatImage& im = (*b.images)[k];
      if (im.n_tokens < 1 || im.width < 1 || im.height < 1)
        throw Error(w + ": image " + std::to_string(k) + " has no size or no tokens");
      b.segs.push_back({media_block_text(im), true, static_cast<int64_t>(k), im.n_tokens});
      continue;
    }
    if (type != "text")
      throw Error(w + ": content part type \"" + type + "\" is not supported (text, image_url or image)");
    if (!part.contains("text") || !part["text"].is_string()) throw Error(w + ".text: expected a string");
    b.text(part["text"].get<std::string>());
  }
}

std::string opt_string(const OJ& msg, const char* key, std::size_t i) {
  auto it = msg.find(key);
  if (it == msg.end() || it->is_null()) return {};
  if (!it->is_string()) throw Error(where(i, key) + ": expected a string, found " + it->type_name());
  return it->get<std::string>();
}

std::string json_type_name(const OJ& v) {
  switch (v.type()) {
    case OJ::value_t::boolean: return "boolean";
    case OJ::value_t::null: return "null";
    case OJ::value_t::number_integer:
    case OJ::value_t::number_unsigned:
    case OJ::value_t::number_float: return "number";
    case OJ::value_t::string: return "string";
    case OJ::value_t::object: return "object";
    case OJ::value_t::array: return "array";
    default: return "null";
  }
}

struct CallInfo {
  std::string id, name;
};

std::vector<CallInfo> add_assistant(Builder& b, const OJ& msg, std::size_t i, bool thinking) {
  b.open("message", {{"role", "assistant"}});
  if (thinking) {
    std::string reasoning = opt_string(msg, "reasoning_content", i);
    if (reasoning.empty()) reasoning = opt_string(msg, "reasoning", i);
    b.open("think");
    b.text(reasoning);
    b.close("think");
  }
  b.open("response");
  add_content(b, msg, i);
  b.close("response");
  std::vector<CallInfo> calls;
  auto tc = msg.find("tool_calls");
  if (tc != msg.end() && !tc->is_null()) {
    if (!tc->is_array()) throw Error(where(i, "tool_calls") + ": expected a list");
    if (!tc->empty()) {
      b.open("tools");
      std::size_t k = 0;
      for (const auto& call : *tc) {
        const std::string w = where(i, "tool_calls[" + std::to_string(k) + "]");
        ++k;
        if (!call.is_object()) throw Error(w + ": expected an object");
        const OJ& fn = call.contains("function") ? call["function"] : call;
        if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string())
          throw Error(w + ".function.name: expected a string");
        CallInfo info{call.contains("id") && call["id"].is_string() ? call["id"].get<std::string>() : "",
                      fn["name"].get<std::string>()};
        b.open("call", {{"tool", info.name}, {"index", std::to_string(k)}});
        OJ args;
        std::string raw;
        bool have_raw = false;
        if (fn.contains("arguments")) {
          const OJ& a = fn["arguments"];
          if (a.is_string()) {
            raw = a.get<std::string>();
            // The parsed arguments are printed again (py_json_dumps recurses per level).
            check_json_depth(raw, w + ".function.arguments");
            try {
              args = OJ::parse(raw);
            } catch (const OJ::exception&) {
              have_raw = true;
            }
            if (!have_raw && !args.is_object()) have_raw = true;
          } else if (a.is_object()) {
            args = a;
          } else if (!a.is_null()) {
            throw Error(w + ".function.arguments: expected a JSON string or an object, found " + a.type_name());
          }
        }
        if (have_raw) {
          b.open("json", {{"type", "object"}});
          b.text(raw);
          b.close("json");
        } else if (args.is_object()) {
          for (auto it = args.begin(); it != args.end(); ++it) {
            const OJ& v = it.value();
            b.open("argument", {{"key", it.key()}, {"type", json_type_name(v)}});
            b.text(v.is_string() ? v.get<std::string>() : tok::py_json_dumps(v, false, false));
            b.close("argument");
          }
        }
        b.close("call");
        calls.push_back(std::move(info));
      }
      b.close("tools");
    }
  }
  b.close("message");
  b.control(kEnd);
  return calls;
}

}  // namespace

ChatOptions ChatOptions::from_kwargs(const OJ& kw) {
  ChatOptions o;
  if (kw.is_null()) return o;
  if (!kw.is_object()) throw Error("chat kwargs: expected an object, found " + std::string(kw.type_name()));
  for (auto it = kw.begin(); it != kw.end(); ++it) {
    const std::string& k = it.key();
    const OJ& v = it.value();
    auto need_bool = [&] {
      if (!v.is_boolean()) throw Error("chat kwargs." + k + ": expected true/false, found " + v.dump());
      return v.get<bool>();
    };
    if (k == "thinking" || k == "enable_thinking") o.thinking = need_bool();
    else if (k == "add_generation_prompt") o.add_generation_prompt = need_bool();
    else if (k == "thinking_effort") {
      if (v.is_null()) o.thinking_effort.reset();
      else if (v.is_string()) o.thinking_effort = v.get<std::string>();
      else throw Error("chat kwargs.thinking_effort: expected a string or null, found " + v.dump());
    } else if (k == "tools") o.tools = v;
    else if (k == "tool_choice") o.tool_choice = v;
    else if (k == "response_format") o.response_format = v;
    else
      throw Error("chat kwargs: unknown key \"" + k +
                  "\" (known: thinking, enable_thinking, thinking_effort, "
                  "add_generation_prompt, tools, tool_choice, response_format)");
  }
  return o;
}

std::vector<ChatSegment> build_chat_segments(const OJ& messages, const ChatOptions& opt) {
  if (!messages.is_array()) throw Error("chat messages: expected a list, found " + std::string(messages.type_name()));
  Builder b;
  b.images = &opt.images;
  if (!opt.tools.is_null()) {
    if (!opt.tools.is_array()) throw Error("chat tools: expected a list, found " + std::string(opt.tools.type_name()));
    if (!opt.tools.empty())
      b.system_note("tool-declare", "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n" +
                                        tok::py_json_dumps(opt.tools, true, true) + "\n```");
  }
  if (opt.thinking && opt.thinking_effort) {
    const std::string& e = *opt.thinking_effort;
    if (e != "low" && e != "high" && e != "max")
      throw Error("chat thinking_effort: expected low, high or max (the reference rejects others), found \"" + e +
                  "\"");
    b.system_note("thinking-effort",
                  "`thinking_effort` guides on how much to think in your thinking channel (not including the "
                  "response channel), supported values include `low`, `medium`, `high`, and `max`.\nNow the "
                  "system is invoked with `thinking_effort=" +
                      e + "`.");
  }
  std::vector<CallInfo> last_calls;
  std::size_t tool_count = 0;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const OJ& msg = messages[i];
    if (!msg.is_object()) throw Error(where(i, "") + ": expected an object");
    if (!msg.contains("role") || !msg["role"].is_string()) throw Error(where(i, "role") + ": expected a string");
    const std::string role = msg["role"];
    if (role == "user" || role == "system") {
      if (role == "system" && msg.contains("tools") && !msg["tools"].is_null())
        throw Error(where(i, "tools") + ": dynamic tool declarations in a system message are not supported");
      std::vector<std::pair<std::string, std::string>> attrs{{"role", role}};
      const std::string name = opt_string(msg, "name", i);
      if (!name.empty()) attrs.emplace_back("name", name);
      b.open("message", attrs);
      add_content(b, msg, i, role == "user");
      b.close("message");
      b.control(kEnd);
    } else if (role == "assistant") {
      last_calls = add_assistant(b, msg, i, opt.thinking);
      tool_count = 0;
    } else if (role == "tool") {
      // The run of consecutive tool messages; reorder into call order when all ids resolve.
      std::size_t j = i;
      while (j < messages.size() && messages[j].is_object() && messages[j].contains("role") &&
             messages[j]["role"] == "tool")
        ++j;
      std::vector<std::size_t> order;
      for (std::size_t k = i; k < j; ++k) order.push_back(k);
      std::map<std::size_t, std::size_t> call_pos;  // message index -> call index
      bool all = !last_calls.empty();
      for (std::size_t k : order) {
        const std::string id = opt_string(messages[k], "tool_call_id", k);
        auto it = std::find_if(last_calls.begin(), last_calls.end(),
                               [&](const CallInfo& c) { return !id.empty() && c.id == id; });
        if (it == last_calls.end()) {
          all = false;
          break;
        }
        call_pos[k] = static_cast<std::size_t>(it - last_calls.begin());
      }
      if (all)
        std::stable_sort(order.begin(), order.end(),
                         [&](std::size_t a, std::size_t c) { return call_pos[a] < call_pos[c]; });
      for (std::size_t k : order) {
        const OJ& m = messages[k];
        ++tool_count;
        std::string name = opt_string(m, "tool", k);
        if (name.empty()) name = opt_string(m, "name", k);
        if (name.empty() && tool_count <= last_calls.size()) name = last_calls[tool_count - 1].name;
        std::vector<std::pair<std::string, std::string>> attrs{{"role", "tool"}};
        if (!name.empty()) attrs.emplace_back("tool", name);
        attrs.emplace_back("index", std::to_string(tool_count));
        b.open("message", attrs);
        add_content(b, m, k);
        b.close("message");
        b.control(kEnd);
      }
      i = j - 1;
    }
    // any other role (e.g. "developer") is skipped, as in the reference
  }
  if (opt.tool_choice.is_string()) {
    const std::string tc = opt.tool_choice;
    if (tc == "required")
      b.system_note("tool-choice",
                    "The system is invoked with `tool_choice=required`.\nYou MUST call tools in the next message.");
    else if (tc == "none")
      b.system_note("tool-choice",
                    "The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in the next message.");
  } else if (!opt.tool_choice.is_null()) {
    throw Error("chat tool_choice: only \"auto\", \"required\" and \"none\" are supported, found " +
                opt.tool_choice.dump());
  }
  if (!opt.response_format.is_null()) {
    const OJ& rf = opt.response_format;
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      throw Error("chat response_format: expected an object with a string \"type\"");
    const std::string type = rf["type"];
    if (type == "json_object")
      b.system_note("response-format",
                    "The system is invoked with `response_format=json_object`.\nYour response must be raw JSON data "
                    "without markdown code blocks (```json) or any additional formatting.");
    else if (type != "text")
      throw Error("chat response_format.type: \"" + type + "\" is not supported (json_object or text)");
  }
  if (b.n_images != opt.images.size())
    throw Error("chat messages: " + std::to_string(b.n_images) + " image part(s) in user messages but " +
                std::to_string(opt.images.size()) + " image(s) given");
  if (opt.add_generation_prompt) {
    b.open("message", {{"role", "assistant"}});
    b.open(opt.thinking ? "think" : "response");
  }
  return b.segs;
}

std::string media_block_text(const ChatImage& image) {
  return "<|media_begin|>image " + std::to_string(image.width) + "x" + std::to_string(image.height) +
         "<|media_content|><|media_pad|><|media_end|>";
}

ChatIds encode_chat_with_media(const Tokenizer& tok, const std::vector<ChatSegment>& segs) {
  ChatIds r;
  int32_t pad = -1;
  for (const auto& s : segs) {
    const auto part = tok.encode(s.text, s.control ? AllowedSpecials::all() : AllowedSpecials::none());
    if (s.image < 0) {
      r.ids.insert(r.ids.end(), part.begin(), part.end());
      continue;
    }
    if (pad < 0) pad = tok.require_special("<|media_pad|>");
    const auto at = std::find(part.begin(), part.end(), pad);
    if (at == part.end()) throw Error("chat: the media block of image " + std::to_string(s.image) + " has no <|media_pad|>");
    r.ids.insert(r.ids.end(), part.begin(), at);
    r.media.push_back({static_cast<int64_t>(r.ids.size()), s.n_pads, s.image});
    r.ids.insert(r.ids.end(), static_cast<std::size_t>(s.n_pads), pad);
    r.ids.insert(r.ids.end(), at + 1, part.end());
  }
  return r;
}

std::vector<int32_t> encode_chat_segments(const Tokenizer& tok, const std::vector<ChatSegment>& segs) {
  return encode_chat_with_media(tok, segs).ids;
}

std::string join_chat_segments(const std::vector<ChatSegment>& segs) {
  std::string s;
  for (const auto& g : segs) s += g.text;
  return s;
}

std::vector<int32_t> render_chat(const Tokenizer& tok, const OJ& messages, const ChatOptions& opt) {
  return encode_chat_segments(tok, build_chat_segments(messages, opt));
}

}  // namespace k3
