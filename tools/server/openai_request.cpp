// OpenAI request bodies -> ChatRequest / CompletionRequest, with field-naming 400 errors.
#include "openai_request.h"

#include <algorithm>
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

void check_known_fields(const OJ& body, const std::vector<std::string>& known, const char* endpoint) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) != known.end()) continue;
    std::string k = it.key();
    if (k.size() > 64) k = k.substr(0, 61) + "...";
    throw bad_request(k, k + ": unknown or unsupported field for " + endpoint + " (the fields k3 takes are listed in docs/api.md)");
  }
}

std::vector<std::pair<int32_t, float>> get_logit_bias(const OJ& body) {
  std::vector<std::pair<int32_t, float>> out;
  const OJ* v = field(body, "logit_bias");
  if (!v) return out;
  if (!v->is_object())
    throw bad_request("logit_bias", "logit_bias: expected an object mapping token ids to biases, found " + shown(*v));
  if (v->size() > 1024)
    throw bad_request("logit_bias", "logit_bias: at most 1024 entries, found " + std::to_string(v->size()));
  for (auto it = v->begin(); it != v->end(); ++it) {
    const std::string& key = it.key();
    const bool digits = !key.empty() && key.size() <= 10 &&
                        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    const long long id = digits ? std::stoll(key) : -1;
    if (id < 0 || id > INT32_MAX)
      throw bad_request("logit_bias", "logit_bias: key \"" + key.substr(0, 40) + "\" is not a token id");
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < -100 || it->get<double>() > 100)
      throw bad_request("logit_bias", "logit_bias[\"" + key + "\"]: expected a number in [-100, 100], found " + shown(*it));
    out.emplace_back(static_cast<int32_t>(id), it->get<float>());
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
  s.logit_bias = get_logit_bias(body);
  if (const OJ* gr = field(body, "grammar")) {
    if (!gr->is_string() || gr->get<std::string>().empty())
      throw bad_request("grammar", "grammar: expected a non-empty GBNF grammar string, found " + shown(*gr));
    g.constraint.kind = ConstraintSpec::Kind::Gbnf;
    g.constraint.text = gr->get<std::string>();
    g.constraint_param = "grammar";
  }

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

// Combinations a constraint cannot honour.
void check_constraint(const GenerationFields& g) {
  if (g.constraint.empty()) return;
  if (g.ignore_eos)
    throw bad_request("ignore_eos", "ignore_eos: cannot be combined with " + g.constraint_param +
                                        " (a constrained answer ends on a stop id)");
  if (g.forced_output)
    throw bad_request("k3_forced_output", "k3_forced_output: cannot be combined with " + g.constraint_param);
  if (!g.stop.empty())
    throw bad_request("stop", "stop: cannot be combined with " + g.constraint_param +
                                  " (a stop string would cut the constrained answer; it ends by its grammar)");
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

const std::vector<std::string> kChatFields = {
    "model", "user", "stream", "stream_options", "ignore_eos", "speculative", "n", "max_tokens",
    "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "frequency_penalty",
    "presence_penalty", "seed", "stop", "k3_forced_output", "logit_bias", "grammar", "messages", "logprobs",
    "top_logprobs", "tools", "tool_choice", "reasoning_effort", "response_format", "chat_template_kwargs"};
const std::vector<std::string> kCompletionFields = {
    "model", "user", "stream", "stream_options", "ignore_eos", "speculative", "n", "max_tokens",
    "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "frequency_penalty",
    "presence_penalty", "seed", "stop", "k3_forced_output", "logit_bias", "grammar", "prompt", "echo", "logprobs"};

std::optional<std::string> map_reasoning_effort(const OJ& v, const std::string& param) {
  if (v.is_string()) {
    const std::string e = v.get<std::string>();
    if (e == "minimal" || e == "low") return std::string("low");
    if (e == "medium" || e == "high") return std::string("high");
    if (e == "xhigh" || e == "max") return std::string("max");
    if (e == "none") return std::nullopt;
  }
  throw bad_request(param, param + ": expected \"none\", \"minimal\", \"low\", \"medium\", \"high\", \"xhigh\" or \"max\", found " +
                               shown(v));
}

ChatRequest parse_chat_request(const OJ& body, const RequestDefaults& d) {
  check_known_fields(body, kChatFields, "/v1/chat/completions");
  ChatRequest r;
  r.gen = parse_generation(body, d);
  r.gen.n = get_int(body, "n", 1, 16).value_or(1);
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

  bool effort_off = false;
  if (const OJ* e = field(body, "reasoning_effort")) {
    r.chat.thinking_effort = map_reasoning_effort(*e, "reasoning_effort");
    effort_off = !r.chat.thinking_effort.has_value();
  }
  if (const OJ* rf = field(body, "response_format")) {
    const char* expect =
        "response_format: expected {\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": \"json_schema\", "
        "\"json_schema\": {\"name\": ..., \"schema\": {...}, \"strict\": true}}, found ";
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      throw bad_request("response_format", expect + shown(*rf));
    const std::string type = (*rf)["type"];
    for (auto it = rf->begin(); it != rf->end(); ++it)
      if (it.key() != "type" && !(type == "json_schema" && it.key() == "json_schema"))
        throw bad_request("response_format", "response_format." + it.key().substr(0, 40) +
                                                 ": unknown or unsupported field for type \"" + type + "\"");
    if (type == "text") {
      r.chat.response_format = OJ{{"type", "text"}};
    } else if (type == "json_object") {
      // The K3 template's json_object note, and the grammar of any JSON object.
      r.chat.response_format = OJ{{"type", "json_object"}};
      r.gen.constraint.kind = ConstraintSpec::Kind::JsonObject;
    } else if (type == "json_schema") {
      const auto js = rf->find("json_schema");
      if (js == rf->end() || !js->is_object())
        throw bad_request("response_format", "response_format.json_schema: expected an object, found " +
                                                 (js == rf->end() ? std::string("nothing") : shown(*js)));
      for (auto it = js->begin(); it != js->end(); ++it)
        if (it.key() != "name" && it.key() != "schema" && it.key() != "strict" && it.key() != "description")
          throw bad_request("response_format", "response_format.json_schema." + it.key().substr(0, 40) +
                                                   ": unknown field (expected name, description, schema, strict)");
      if (auto n = js->find("name"); n != js->end() && !n->is_string())
        throw bad_request("response_format", "response_format.json_schema.name: expected a string, found " + shown(*n));
      if (auto d = js->find("description"); d != js->end() && !d->is_null() && !d->is_string())
        throw bad_request("response_format",
                          "response_format.json_schema.description: expected a string, found " + shown(*d));
      const auto sc = js->find("schema");
      if (sc == js->end() || !(sc->is_object() || sc->is_boolean()))
        throw bad_request("response_format", "response_format.json_schema.schema: expected a JSON Schema object, found " +
                                                 (sc == js->end() ? std::string("nothing") : shown(*sc)));
      bool strict = false;
      if (auto st = js->find("strict"); st != js->end() && !st->is_null()) {
        if (!st->is_boolean())
          throw bad_request("response_format",
                            "response_format.json_schema.strict: expected true or false, found " + shown(*st));
        strict = st->get<bool>();
      }
      if (r.gen.constraint_param == "grammar")
        throw bad_request("grammar", "grammar: cannot be combined with a response_format of type " + type);
      // The template has no schema note: the json_object note asks for JSON, the grammar gives
      // the schema's shape.
      r.chat.response_format = OJ{{"type", "json_object"}};
      r.gen.constraint.kind = ConstraintSpec::Kind::JsonSchema;
      r.gen.constraint.text = sc->dump();
      r.gen.constraint.strict = strict;
    } else {
      throw bad_request("response_format", "response_format.type: \"" + type +
                                               "\" is not supported (expected \"text\", \"json_object\" or \"json_schema\")");
    }
    if (type != "text") {
      if (r.gen.constraint_param == "grammar")
        throw bad_request("grammar", "grammar: cannot be combined with a response_format of type " + type);
      r.gen.constraint_param = "response_format";
    }
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
    for (auto it = kw->begin(); it != kw->end(); ++it)
      if (it.key() != "thinking" && it.key() != "enable_thinking" && it.key() != "thinking_effort")
        throw bad_request("chat_template_kwargs", "chat_template_kwargs." + it.key().substr(0, 40) +
                                                      ": unknown key (expected thinking, enable_thinking, thinking_effort)");
  }
  if (effort_off) r.chat.thinking = false;
  if (r.tools_given && r.chat.tool_choice == "required") {
    // "required" or a named function: one call of a declared tool, its arguments constrained to
    // the tool's parameters schema.
    if (!r.gen.constraint.empty())
      throw bad_request("tool_choice", "tool_choice: a required tool call cannot be combined with " +
                                           r.gen.constraint_param + " (both constrain the answer)");
    r.gen.constraint.kind = ConstraintSpec::Kind::ToolCall;
    for (const auto& t : r.chat.tools) {
      const OJ& fn = t["function"];
      ConstraintSpec::Tool tool{fn["name"].get<std::string>(), ""};
      if (auto p = fn.find("parameters"); p != fn.end() && !p->is_null()) {
        if (!p->is_object())
          throw bad_request("tools", "tools: function \"" + tool.name + "\" parameters: expected a JSON Schema object");
        tool.parameters = p->dump();
      }
      r.gen.constraint.tools.push_back(std::move(tool));
    }
    r.gen.constraint_param = "tool_choice";
  }
  if (!r.gen.constraint.empty()) r.gen.constraint.after_think = r.chat.thinking;  // the prompt opened think
  check_constraint(r.gen);
  return r;
}

CompletionRequest parse_completion_request(const OJ& body, const RequestDefaults& d) {
  check_known_fields(body, kCompletionFields, "/v1/completions");
  CompletionRequest r;
  r.gen = parse_generation(body, d);
  (void)get_int(body, "n", 1, 1, "1 (several choices are served by /v1/chat/completions only)");
  check_constraint(r.gen);
  if (auto lp = get_int(body, "logprobs", 0, 20)) r.gen.top_logprobs = static_cast<int>(*lp);
  r.echo = get_bool(body, "echo").value_or(false);
  const OJ* p = field(body, "prompt");
  if (!p) throw bad_request("prompt", "prompt: required (a string or a list of token ids)");
  // One prompt (a string or a list of ids), or a list of prompts (strings or id lists).
  std::vector<const OJ*> items;
  const bool is_list = p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array());
  if (is_list) {
    if (p->size() > 16)
      throw bad_request("prompt", "prompt: at most 16 prompts per request, found " + std::to_string(p->size()));
    for (const auto& x : *p) items.push_back(&x);
  } else {
    items.push_back(p);
  }
  for (size_t k = 0; k < items.size(); ++k) {
    const OJ* one = items[k];
    const std::string w = is_list ? "prompt[" + std::to_string(k) + "]" : "prompt";
    CompletionPrompt cp;
    if (one->is_string()) {
      if (one->get<std::string>().empty()) throw bad_request("prompt", w + ": is empty (expected at least 1 token)");
      cp.text = one->get<std::string>();
    } else if (one->is_array() && !one->empty()) {
      for (std::size_t i = 0; i < one->size(); ++i) {
        const OJ& x = (*one)[i];
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
          throw bad_request("prompt", w + "[" + std::to_string(i) + "]: expected a token id (integer >= 0), found " +
                                          shown(x));
        cp.ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
      }
    } else {
      throw bad_request("prompt", w + ": expected a non-empty string or list of token ids, found " + shown(*one));
    }
    r.prompts.push_back(std::move(cp));
  }
  r.prompt_text = r.prompts[0].text;
  r.prompt_ids = r.prompts[0].ids;
  return r;
}

}  // namespace k3::server
