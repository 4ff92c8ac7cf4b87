// OpenAI request bodies -> ChatRequest / CompletionRequest, with field-naming 400 errors.
#include "openai_request.h"

#include <cmath>
#include <cstdio>
#include <random>

#include "api_error.h"
#include "core/json_depth.h"

namespace k3::server {
namespace {

using OJ = nlohmann::ordered_json;

std::string shown(const OJ& v) {
  std::string s = v.dump(-1, ' ', false, OJ::error_handler_t::replace);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

const OJ* field(const OJ& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> get_number(const OJ& body, const char* key, double lo, double hi, bool lo_open = false) {
  const OJ* v = field(body, key);
  if (!v) return std::nullopt;
  auto g = [](double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", x);
    return std::string(b);
  };
  const std::string range = std::string(lo_open ? "(" : "[") + g(lo) + ", " + g(hi) + "]";
  if (!v->is_number())
    throw bad_request(key, std::string(key) + ": expected a number in " + range + ", found " + shown(*v));
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi || (lo_open && d == lo))
    throw bad_request(key, std::string(key) + ": expected a number in " + range + ", found " + shown(*v));
  return d;
}

std::optional<int64_t> get_int(const OJ& body, const char* key, int64_t lo, int64_t hi, const std::string& what = {}) {
  const OJ* v = field(body, key);
  if (!v) return std::nullopt;
  const std::string expect =
      what.empty() ? "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]" : what;
  if (!v->is_number_integer())
    throw bad_request(key, std::string(key) + ": expected " + expect + ", found " + shown(*v));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    throw bad_request(key, std::string(key) + ": expected " + expect + ", found " + shown(*v));
  const int64_t i = v->get<int64_t>();
  if (i < lo || i > hi) throw bad_request(key, std::string(key) + ": expected " + expect + ", found " + shown(*v));
  return i;
}

std::optional<bool> get_bool(const OJ& body, const char* key) {
  const OJ* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) throw bad_request(key, std::string(key) + ": expected true or false, found " + shown(*v));
  return v->get<bool>();
}

std::vector<std::string> get_stop(const OJ& body) {
  std::vector<std::string> out;
  const OJ* v = field(body, "stop");
  if (!v) return out;
  if (v->is_string()) {
    if (!v->get<std::string>().empty()) out.push_back(v->get<std::string>());
    return out;
  }
  if (!v->is_array()) throw bad_request("stop", "stop: expected a string or a list of strings, found " + shown(*v));
  if (v->size() > 16)
    throw bad_request("stop", "stop: at most 16 stop strings are supported, found " + std::to_string(v->size()));
  for (std::size_t i = 0; i < v->size(); ++i) {
    const OJ& s = (*v)[i];
    if (!s.is_string())
      throw bad_request("stop", "stop[" + std::to_string(i) + "]: expected a string, found " + shown(s));
    if (!s.get<std::string>().empty()) out.push_back(s.get<std::string>());
  }
  return out;
}

// Fields shared by both endpoints (everything but logprobs, which differ in shape).
GenerationFields parse_generation(const OJ& body, const RequestDefaults& d) {
  GenerationFields g;
  if (const OJ* m = field(body, "model")) {
    if (!m->is_string()) throw bad_request("model", "model: expected a string, found " + shown(*m));
    g.model = m->get<std::string>();
  }
  if (const OJ* u = field(body, "user")) {
    if (!u->is_string()) throw bad_request("user", "user: expected a string, found " + shown(*u));
    g.user = u->get<std::string>();
  }
  g.stream = get_bool(body, "stream").value_or(false);
  g.ignore_eos = get_bool(body, "ignore_eos").value_or(false);
  g.speculative = get_bool(body, "speculative").value_or(true);
  if (const OJ* so = field(body, "stream_options")) {
    if (!so->is_object())
      throw bad_request("stream_options", "stream_options: expected an object, found " + shown(*so));
    if (auto it = so->find("include_usage"); it != so->end() && !it->is_null()) {
      if (!it->is_boolean())
        throw bad_request("stream_options.include_usage",
                          "stream_options.include_usage: expected true or false, found " + shown(*it));
      g.include_usage = it->get<bool>();
    }
  }
  if (auto n = get_int(body, "n", 1, 1, "1 (only one choice per request is supported)")) (void)n;
  const std::string mt_what = "an integer >= 1";
  std::optional<int64_t> mt = get_int(body, "max_tokens", 1, INT64_MAX, mt_what);
  if (auto mct = get_int(body, "max_completion_tokens", 1, INT64_MAX, mt_what)) mt = mct;
  g.max_tokens = mt;

  SamplerParams& s = g.sampling;
  s = d.sampling;
  if (auto v = get_number(body, "temperature", 0, 2)) s.temp = static_cast<float>(*v);
  if (auto v = get_number(body, "top_p", 0, 1, /*lo_open=*/true)) s.top_p = static_cast<float>(*v);
  if (auto v = get_int(body, "top_k", -1, INT32_MAX, "an integer >= -1 (-1 or 0: off)"))
    s.top_k = *v < 0 ? 0 : static_cast<int32_t>(*v);
  if (auto v = get_number(body, "min_p", 0, 1)) s.min_p = static_cast<float>(*v);
  if (auto v = get_number(body, "repetition_penalty", 0, 10, /*lo_open=*/true))
    s.repeat_penalty = static_cast<float>(*v);
  const auto fp = get_number(body, "frequency_penalty", -2, 2);
  const auto pp = get_number(body, "presence_penalty", -2, 2);
  if (fp) s.frequency_penalty = static_cast<float>(*fp);
  if (pp) s.presence_penalty = static_cast<float>(*pp);
  if ((fp && *fp != 0) || (pp && *pp != 0)) s.repeat_last_n = -1;  // OpenAI: over the whole history
  if (const OJ* sd = field(body, "seed")) {
    if (!sd->is_number_integer()) throw bad_request("seed", "seed: expected an integer, found " + shown(*sd));
    s.seed = sd->is_number_unsigned() ? sd->get<uint64_t>() : static_cast<uint64_t>(sd->get<int64_t>());
  } else if (!d.seed_given) {
    std::random_device rd;
    s.seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  g.stop = get_stop(body);

  if (const OJ* f = field(body, "k3_forced_output")) {
    if (!d.allow_forced_output)
      throw bad_request("k3_forced_output",
                        "k3_forced_output: only accepted when the server runs with --test-forced-output");
    bool ok = f->is_string() || (f->is_array() && !f->empty());
    if (f->is_array())
      for (const auto& x : *f) ok = ok && x.is_number_integer();
    if (!ok)
      throw bad_request("k3_forced_output",
                        "k3_forced_output: expected a string or a non-empty list of token ids, found " + shown(*f));
    g.forced_output = *f;
  }
  return g;
}

void check_tools(const OJ& tools) {
  if (!tools.is_array()) throw bad_request("tools", "tools: expected a list, found " + shown(tools));
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const std::string w = "tools[" + std::to_string(i) + "]";
    const OJ& t = tools[i];
    if (!t.is_object()) throw bad_request("tools", w + ": expected an object, found " + shown(t));
    if (t.contains("type") && t["type"] != "function")
      throw bad_request("tools", w + ".type: only \"function\" tools are supported, found " + shown(t["type"]));
    if (!t.contains("function") || !t["function"].is_object())
      throw bad_request("tools", w + ".function: expected an object");
    const OJ& fn = t["function"];
    if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get<std::string>().empty())
      throw bad_request("tools", w + ".function.name: expected a non-empty string");
  }
}

std::string tool_name(const OJ& tool) { return tool["function"]["name"].get<std::string>(); }

// A tool call's "arguments" string is JSON text the chat renderer parses and prints again: it
// gets the body's depth bound too, with a 400 naming the field.
void check_tool_call_arguments(const OJ& tool_calls, const std::string& w) {
  for (std::size_t k = 0; k < tool_calls.size(); ++k) {
    const OJ& call = tool_calls[k];
    if (!call.is_object()) continue;  // the renderer names the malformed call
    const bool nested = call.contains("function");
    const OJ& fn = nested ? call["function"] : call;
    if (!fn.is_object()) continue;
    auto a = fn.find("arguments");
    if (a == fn.end() || !a->is_string()) continue;
    const JsonDepthScan scan = scan_json_depth(a->get_ref<const std::string&>(), kMaxJsonDepth);
    if (scan.exceeded)
      throw bad_request("messages", w + ".tool_calls[" + std::to_string(k) + "]" + (nested ? ".function" : "") +
                                        ".arguments: JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                                        " levels");
  }
}

OJ check_messages(const OJ& body) {
  const OJ* m = field(body, "messages");
  if (!m) throw bad_request("messages", "messages: required (a non-empty list of messages)");
  if (!m->is_array() || m->empty())
    throw bad_request("messages", "messages: expected a non-empty list, found " + shown(*m));
  OJ out = OJ::array();
  for (std::size_t i = 0; i < m->size(); ++i) {
    const std::string w = "messages[" + std::to_string(i) + "]";
    OJ msg = (*m)[i];
    if (!msg.is_object()) throw bad_request("messages", w + ": expected an object, found " + shown(msg));
    if (!msg.contains("role") || !msg["role"].is_string())
      throw bad_request("messages", w + ".role: expected a string (system, user, assistant or tool)");
    std::string role = msg["role"];
    if (role == "developer") msg["role"] = role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      throw bad_request(
          "messages", w + ".role: unknown role \"" + role + "\" (expected system, developer, user, assistant or tool)");
    auto c = msg.find("content");
    if (c == msg.end() || c->is_null()) {
      if (role != "assistant") throw bad_request("messages", w + ".content: required for a " + role + " message");
    } else if (!c->is_string() && !c->is_array()) {
      throw bad_request("messages", w + ".content: expected a string or a list of content parts, found " + shown(*c));
    }
    for (const char* k : {"reasoning_content", "reasoning", "name", "tool_call_id"}) {
      auto it = msg.find(k);
      if (it != msg.end() && !it->is_null() && !it->is_string())
        throw bad_request("messages", w + "." + k + ": expected a string, found " + shown(*it));
    }
    if (auto tc = msg.find("tool_calls"); tc != msg.end() && !tc->is_null()) {
      if (!tc->is_array()) throw bad_request("messages", w + ".tool_calls: expected a list, found " + shown(*tc));
      check_tool_call_arguments(*tc, w);
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace

OJ parse_body(const std::string& body) {
  // Deeply nested values would make the recursive parts of nlohmann::json (copy, dump) and of
  // the chat renderer overflow the stack: refuse them before parsing.
  if (!json_depth_within(body, kMaxJsonDepth))
    throw ApiError(
        400,
        "JSON decode error: values nested deeper than " + std::to_string(kMaxJsonDepth) + " levels are not accepted",
        "body");
  OJ j;
  try {
    j = OJ::parse(body);
  } catch (const OJ::exception& e) {  // parse_error, and out_of_range for a number beyond a double (1e999)
    throw ApiError(400, std::string("JSON decode error: ") + e.what(), "body");
  }
  if (!j.is_object())
    throw ApiError(400, "JSON decode error: the body must be a JSON object, found " + std::string(j.type_name()),
                   "body");
  return j;
}

ChatRequest parse_chat_request(const OJ& body, const RequestDefaults& d) {
  ChatRequest r;
  r.gen = parse_generation(body, d);
  r.chat.thinking = d.thinking;
  r.messages = check_messages(body);
  if (auto lp = get_bool(body, "logprobs"); lp && *lp) {
    r.gen.top_logprobs = static_cast<int>(get_int(body, "top_logprobs", 0, 20).value_or(0));
  } else if (field(body, "top_logprobs")) {
    (void)get_int(body, "top_logprobs", 0, 20);
    throw bad_request("top_logprobs", "top_logprobs: requires \"logprobs\": true");
  }

  OJ tools = OJ();
  if (const OJ* t = field(body, "tools")) {
    check_tools(*t);
    if (!t->empty()) tools = *t;
  }
  r.tools_given = !tools.is_null();
  OJ choice = OJ();
  if (const OJ* tc = field(body, "tool_choice")) {
    if (tc->is_string()) {
      const std::string c = *tc;
      if (c != "auto" && c != "none" && c != "required")
        throw bad_request(
            "tool_choice",
            "tool_choice: expected \"auto\", \"none\", \"required\" or a named function, found " + shown(*tc));
      if (c == "required" && !r.tools_given)
        throw bad_request("tool_choice", "tool_choice: \"required\" needs a non-empty \"tools\" list");
      if (c != "auto") choice = c;
    } else if (tc->is_object()) {
      const auto fn = tc->find("function");
      const auto ty = tc->find("type");
      if (ty == tc->end() || *ty != "function" || fn == tc->end() || !fn->is_object() || !fn->contains("name") ||
          !(*fn)["name"].is_string())
        throw bad_request(
            "tool_choice",
            "tool_choice: expected {\"type\": \"function\", \"function\": {\"name\": ...}}, found " + shown(*tc));
      const std::string name = (*fn)["name"];
      OJ only = OJ::array();
      if (r.tools_given)
        for (const auto& t : tools)
          if (tool_name(t) == name) only.push_back(t);
      if (only.empty())
        throw bad_request("tool_choice", "tool_choice: function \"" + name + "\" is not among the declared tools");
      tools = only;  // K3 has no named-choice note: declare only that tool and require a call
      choice = "required";
    } else {
      throw bad_request("tool_choice", "tool_choice: expected a string or an object, found " + shown(*tc));
    }
  }
  r.chat.tools = tools;
  r.chat.tool_choice = choice;

  if (const OJ* e = field(body, "reasoning_effort")) {
    if (!e->is_string() || (*e != "low" && *e != "high" && *e != "max"))
      throw bad_request("reasoning_effort",
                        "reasoning_effort: expected \"low\", \"high\" or \"max\" (K3's efforts), found " + shown(*e));
    r.chat.thinking_effort = e->get<std::string>();
  }
  if (const OJ* rf = field(body, "response_format")) {
    // The K3 template knows json_object (a system note) and text (nothing); no json_schema.
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      throw bad_request(
          "response_format",
          "response_format: expected {\"type\": \"json_object\"} or {\"type\": \"text\"}, found " + shown(*rf));
    const std::string type = (*rf)["type"];
    if (type != "json_object" && type != "text")
      throw bad_request("response_format", "response_format.type: \"" + type +
                                               "\" is not supported (expected \"json_object\" or \"text\")");
    r.chat.response_format = OJ{{"type", type}};
  }
  if (const OJ* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object())
      throw bad_request("chat_template_kwargs", "chat_template_kwargs: expected an object, found " + shown(*kw));
    for (const char* k : {"thinking", "enable_thinking"}) {
      auto it = kw->find(k);
      if (it == kw->end() || it->is_null()) continue;
      if (!it->is_boolean())
        throw bad_request("chat_template_kwargs",
                          std::string("chat_template_kwargs.") + k + ": expected true or false, found " + shown(*it));
      r.chat.thinking = it->get<bool>();
    }
    if (auto it = kw->find("thinking_effort"); it != kw->end() && !it->is_null() && !field(body, "reasoning_effort")) {
      if (!it->is_string() || (*it != "low" && *it != "high" && *it != "max"))
        throw bad_request(
            "chat_template_kwargs",
            "chat_template_kwargs.thinking_effort: expected \"low\", \"high\" or \"max\", found " + shown(*it));
      r.chat.thinking_effort = it->get<std::string>();
    }
  }
  return r;
}

CompletionRequest parse_completion_request(const OJ& body, const RequestDefaults& d) {
  CompletionRequest r;
  r.gen = parse_generation(body, d);
  if (auto lp = get_int(body, "logprobs", 0, 20)) r.gen.top_logprobs = static_cast<int>(*lp);
  r.echo = get_bool(body, "echo").value_or(false);
  const OJ* p = field(body, "prompt");
  if (!p) throw bad_request("prompt", "prompt: required (a string or a list of token ids)");
  const OJ* one = p;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) one = &(*p)[0];
  if (one->is_string()) {
    if (one->get<std::string>().empty()) throw bad_request("prompt", "prompt: is empty (expected at least 1 token)");
    r.prompt_text = one->get<std::string>();
  } else if (one->is_array() && !one->empty()) {
    for (std::size_t i = 0; i < one->size(); ++i) {
      const OJ& x = (*one)[i];
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
        throw bad_request(
            "prompt", "prompt[" + std::to_string(i) + "]: expected a token id (integer >= 0), found " + shown(x) +
                          (x.is_string() ? " (batched prompts are not supported: send one prompt per request)" : ""));
      r.prompt_ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
  } else {
    throw bad_request("prompt", "prompt: expected a non-empty string or list of token ids, found " + shown(*p));
  }
  return r;
}

}  // namespace k3::server
