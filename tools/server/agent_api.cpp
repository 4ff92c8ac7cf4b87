// Responses / Messages bodies <-> Chat Completions bodies and StreamDeltas (agent_api.h).
#include "agent_api.h"

#include <set>

#include "api_error.h"
#include "core/json_depth.h"

namespace k3::server {
namespace {

std::string shown(const Json& v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

const Json* field(const Json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return nullptr;
  return &*it;
}

// 400 for every key of `body` outside `allowed`, naming it.
void refuse_unknown(const Json& body, const std::set<std::string>& allowed, const std::string& prefix,
                    const std::string& api) {
  for (auto it = body.begin(); it != body.end(); ++it)
    if (!allowed.count(it.key()))
      throw bad_request(prefix + it.key(), prefix + it.key() + ": not supported by k3's " + api +
                                               " endpoint (docs/serving.md lists the accepted fields)");
}

std::string need_string(const Json& o, const char* key, const std::string& where) {
  const Json* v = field(o, key);
  if (!v || !v->is_string()) throw bad_request(where, where + "." + key + ": expected a string");
  return v->get<std::string>();
}

// Text of a Responses content value: a string, or parts of type input_text / output_text /
// refusal (concatenated).
std::string responses_text(const Json& c, const std::string& w) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) throw bad_request("input", w + ": expected a string or a list of content parts, found " + shown(c));
  std::string out;
  for (std::size_t j = 0; j < c.size(); ++j) {
    const Json& p = c[j];
    const std::string pw = w + "[" + std::to_string(j) + "]";
    if (!p.is_object() || !p.contains("type") || !p["type"].is_string())
      throw bad_request("input", pw + ": expected a content part object with a \"type\"");
    const std::string t = p["type"];
    if (t != "input_text" && t != "output_text" && t != "text" && t != "refusal")
      throw bad_request("input", pw + ".type: \"" + t + "\" is not supported (expected input_text or output_text)");
    const Json* txt = field(p, t == "refusal" ? "refusal" : "text");
    if (!txt || !txt->is_string()) throw bad_request("input", pw + ".text: expected a string");
    out += txt->get<std::string>();
  }
  return out;
}

// K3's effort for an OpenAI effort other than "none": the one table of Chat Completions'
// reasoning_effort (map_reasoning_effort).
std::string k3_effort(const std::string& e, const std::string& param) {
  return map_reasoning_effort(nlohmann::ordered_json(e), param).value_or("low");
}

Json translate_tools_responses(const Json& tools) {
  if (!tools.is_array()) throw bad_request("tools", "tools: expected a list, found " + shown(tools));
  Json out = Json::array();
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const Json& t = tools[i];
    const std::string w = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) throw bad_request("tools", w + ": expected an object");
    const Json* ty = field(t, "type");
    if (!ty || *ty != "function")
      throw bad_request("tools", w + ".type: only \"function\" tools are supported, found " +
                                     (ty ? shown(*ty) : std::string("nothing")));
    refuse_unknown(t, {"type", "name", "description", "parameters", "strict"}, w + ".", "Responses");
    Json fn{{"name", need_string(t, "name", w)}};
    if (const Json* d = field(t, "description")) fn["description"] = *d;
    if (const Json* p = field(t, "parameters")) fn["parameters"] = *p;
    if (const Json* s = field(t, "strict")) fn["strict"] = *s;
    out.push_back(Json{{"type", "function"}, {"function", fn}});
  }
  return out;
}

// Appends the chat messages of Responses input items to `msgs`.
void translate_input_items(const Json& items, Json& msgs) {
  std::string pending_reasoning;
  bool have_reasoning = false;
  auto attach_reasoning = [&](Json& m) {
    if (have_reasoning) m["reasoning_content"] = pending_reasoning;
    pending_reasoning.clear();
    have_reasoning = false;
  };
  for (std::size_t i = 0; i < items.size(); ++i) {
    const Json& it = items[i];
    const std::string w = "input[" + std::to_string(i) + "]";
    if (!it.is_object()) throw bad_request("input", w + ": expected an object, found " + shown(it));
    const std::string type = field(it, "type") && it["type"].is_string() ? it["type"].get<std::string>() : "message";
    if (type == "message") {
      const std::string role = need_string(it, "role", w);
      if (role != "user" && role != "system" && role != "developer" && role != "assistant")
        throw bad_request("input", w + ".role: expected user, system, developer or assistant, found \"" + role + "\"");
      const Json* c = field(it, "content");
      if (!c) throw bad_request("input", w + ".content: required");
      Json m{{"role", role == "developer" ? "system" : role}, {"content", responses_text(*c, w + ".content")}};
      if (role == "assistant") attach_reasoning(m);
      msgs.push_back(std::move(m));
    } else if (type == "function_call") {
      Json call{{"id", need_string(it, "call_id", w)},
                {"type", "function"},
                {"function", {{"name", need_string(it, "name", w)}, {"arguments", need_string(it, "arguments", w)}}}};
      if (msgs.empty() || msgs.back()["role"] != "assistant" || have_reasoning) {
        Json m{{"role", "assistant"}, {"content", ""}, {"tool_calls", Json::array()}};
        attach_reasoning(m);
        msgs.push_back(std::move(m));
      }
      Json& m = msgs.back();
      if (!m.contains("tool_calls")) m["tool_calls"] = Json::array();
      m["tool_calls"].push_back(std::move(call));
    } else if (type == "function_call_output") {
      const Json* out = field(it, "output");
      if (!out) throw bad_request("input", w + ".output: required");
      msgs.push_back(Json{{"role", "tool"},
                          {"tool_call_id", need_string(it, "call_id", w)},
                          {"content", responses_text(*out, w + ".output")}});
    } else if (type == "reasoning") {
      std::string text;
      if (const Json* c = field(it, "content"); c && c->is_array())
        for (const auto& p : *c)
          if (p.is_object() && p.contains("text") && p["text"].is_string()) text += p["text"].get<std::string>();
      if (text.empty())
        if (const Json* s = field(it, "summary"); s && s->is_array())
          for (const auto& p : *s)
            if (p.is_object() && p.contains("text") && p["text"].is_string()) text += p["text"].get<std::string>();
      if (field(it, "encrypted_content"))
        throw bad_request("input", w + ".encrypted_content: k3 does not produce or read encrypted reasoning");
      pending_reasoning += text;
      have_reasoning = true;
    } else {
      throw bad_request("input", w + ".type: \"" + type +
                                     "\" is not supported (expected message, function_call, "
                                     "function_call_output or reasoning)");
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------

std::string responses_previous_id(const Json& body) {
  const Json* p = field(body, "previous_response_id");
  if (!p) return {};
  if (!p->is_string() || p->get<std::string>().empty())
    throw bad_request("previous_response_id", "previous_response_id: expected a response id string, found " + shown(*p));
  return p->get<std::string>();
}

ResponsesTranslation translate_responses_request(const Json& body, const Json& history) {
  static const std::set<std::string> kAllowed = {
      "model",    "input",        "instructions", "tools",   "tool_choice",         "text",       "reasoning",
      "max_output_tokens", "temperature", "top_p", "top_k", "seed", "stream", "store", "previous_response_id",
      "metadata", "user",         "parallel_tool_calls",     "truncation",          "include",    "service_tier",
      "background", "k3_forced_output"};
  refuse_unknown(body, kAllowed, "", "Responses");
  ResponsesTranslation r;
  Json& cb = r.chat_body;
  Json& echo = r.echo;
  cb = Json::object();
  Json msgs = history.is_array() ? history : Json::array();

  if (const Json* m = field(body, "model")) cb["model"] = *m;
  if (const Json* ins = field(body, "instructions")) {
    if (!ins->is_string()) throw bad_request("instructions", "instructions: expected a string, found " + shown(*ins));
    msgs.insert(msgs.begin(), Json{{"role", "system"}, {"content", *ins}});
    r.instructions_first = true;
    echo["instructions"] = *ins;
  } else {
    echo["instructions"] = nullptr;
  }
  const Json* in = field(body, "input");
  if (!in) throw bad_request("input", "input: required (a string or a list of input items)");
  if (in->is_string()) {
    msgs.push_back(Json{{"role", "user"}, {"content", *in}});
  } else if (in->is_array()) {
    translate_input_items(*in, msgs);
  } else {
    throw bad_request("input", "input: expected a string or a list of items, found " + shown(*in));
  }
  if (msgs.empty()) throw bad_request("input", "input: holds no message");
  cb["messages"] = msgs;

  echo["tools"] = Json::array();
  if (const Json* t = field(body, "tools")) {
    Json tools = translate_tools_responses(*t);
    if (!tools.empty()) cb["tools"] = tools;
    echo["tools"] = *t;
  }
  echo["tool_choice"] = "auto";
  if (const Json* tc = field(body, "tool_choice")) {
    if (tc->is_string()) {
      if (*tc != "auto" && *tc != "none" && *tc != "required")
        throw bad_request("tool_choice",
                          "tool_choice: expected auto, none, required or {\"type\": \"function\", \"name\"}, found " +
                              shown(*tc));
      cb["tool_choice"] = *tc;
    } else if (tc->is_object() && field(*tc, "type") && (*tc)["type"] == "function") {
      cb["tool_choice"] = Json{{"type", "function"}, {"function", {{"name", need_string(*tc, "name", "tool_choice")}}}};
    } else {
      throw bad_request("tool_choice",
                        "tool_choice: expected auto, none, required or {\"type\": \"function\", \"name\"}, found " +
                            shown(*tc));
    }
    echo["tool_choice"] = *tc;
  }
  echo["text"] = Json{{"format", {{"type", "text"}}}};
  if (const Json* tx = field(body, "text")) {
    if (!tx->is_object()) throw bad_request("text", "text: expected an object, found " + shown(*tx));
    refuse_unknown(*tx, {"format", "verbosity"}, "text.", "Responses");
    if (const Json* v = field(*tx, "verbosity"); v && *v != "medium")
      throw bad_request("text.verbosity", "text.verbosity: only \"medium\" is supported, found " + shown(*v));
    if (const Json* f = field(*tx, "format")) {
      if (!f->is_object() || !field(*f, "type") || !(*f)["type"].is_string())
        throw bad_request("text.format", "text.format: expected an object with a \"type\", found " + shown(*f));
      const std::string type = (*f)["type"];
      if (type == "text" || type == "json_object") {
        if (type == "json_object") cb["response_format"] = Json{{"type", "json_object"}};
      } else if (type == "json_schema") {
        refuse_unknown(*f, {"type", "name", "schema", "strict", "description"}, "text.format.", "Responses");
        if (!field(*f, "schema")) throw bad_request("text.format", "text.format.schema: required for json_schema");
        Json js{{"name", f->value("name", "response")}, {"schema", (*f)["schema"]}};
        if (const Json* s = field(*f, "strict")) js["strict"] = *s;
        if (const Json* d = field(*f, "description")) js["description"] = *d;
        cb["response_format"] = Json{{"type", "json_schema"}, {"json_schema", js}};
      } else {
        throw bad_request("text.format", "text.format.type: expected text, json_object or json_schema, found \"" +
                                             type + "\"");
      }
    }
    echo["text"] = *tx;
  }
  echo["reasoning"] = Json{{"effort", nullptr}, {"summary", nullptr}};
  if (const Json* rs = field(body, "reasoning")) {
    if (!rs->is_object()) throw bad_request("reasoning", "reasoning: expected an object, found " + shown(*rs));
    refuse_unknown(*rs, {"effort", "summary", "generate_summary"}, "reasoning.", "Responses");
    if (const Json* e = field(*rs, "effort")) {
      if (!e->is_string()) throw bad_request("reasoning.effort", "reasoning.effort: expected a string, found " + shown(*e));
      if (*e == "none") cb["chat_template_kwargs"] = Json{{"thinking", false}};
      else cb["reasoning_effort"] = k3_effort(*e, "reasoning.effort");
    }
    for (const char* k : {"summary", "generate_summary"})
      if (const Json* s = field(*rs, k); s && *s != "auto" && *s != "concise" && *s != "detailed")
        throw bad_request(std::string("reasoning.") + k,
                          std::string("reasoning.") + k + ": expected auto, concise or detailed, found " + shown(*s));
    echo["reasoning"] = *rs;
  }
  if (const Json* mt = field(body, "max_output_tokens")) cb["max_tokens"] = *mt;
  echo["max_output_tokens"] = body.value("max_output_tokens", Json());
  for (const char* k : {"temperature", "top_p", "top_k", "seed", "stream", "user", "k3_forced_output"})
    if (const Json* v = field(body, k)) cb[k] = *v;
  echo["temperature"] = body.value("temperature", Json());
  echo["top_p"] = body.value("top_p", Json());
  if (const Json* s = field(body, "store")) {
    if (!s->is_boolean()) throw bad_request("store", "store: expected true or false, found " + shown(*s));
    r.store = s->get<bool>();
  }
  echo["store"] = r.store;
  echo["metadata"] = Json::object();
  if (const Json* md = field(body, "metadata")) {
    if (!md->is_object()) throw bad_request("metadata", "metadata: expected an object of strings");
    for (auto it = md->begin(); it != md->end(); ++it)
      if (!it->is_string()) throw bad_request("metadata", "metadata." + it.key() + ": expected a string");
    echo["metadata"] = *md;
  }
  echo["user"] = body.value("user", Json());
  if (const Json* p = field(body, "parallel_tool_calls"); p && *p != true)
    throw bad_request("parallel_tool_calls",
                      "parallel_tool_calls: only true is supported (K3 may call several tools in one turn)");
  echo["parallel_tool_calls"] = true;
  if (const Json* t = field(body, "truncation"); t && *t != "disabled")
    throw bad_request("truncation", "truncation: only \"disabled\" is supported (a prompt over the context is a 400)");
  echo["truncation"] = "disabled";
  if (const Json* inc = field(body, "include"); inc && !(inc->is_array() && inc->empty()))
    throw bad_request("include", "include: no extra output data is available, found " + shown(*inc));
  if (const Json* st = field(body, "service_tier"); st && *st != "auto" && *st != "default")
    throw bad_request("service_tier", "service_tier: expected auto or default, found " + shown(*st));
  if (const Json* bg = field(body, "background"); bg && *bg != false)
    throw bad_request("background", "background: background responses are not supported");
  echo["previous_response_id"] = body.value("previous_response_id", Json());
  return r;
}

ChatRequest parse_translated_responses(const Json& chat_body, const RequestDefaults& d) {
  try {
    return parse_chat_request(chat_body, d);
  } catch (const ApiError& e) {
    static const std::pair<const char*, const char*> kNames[] = {{"messages", "input"},
                                                                 {"max_tokens", "max_output_tokens"},
                                                                 {"response_format", "text.format"},
                                                                 {"reasoning_effort", "reasoning.effort"},
                                                                 {"chat_template_kwargs", "reasoning.effort"}};
    for (const auto& [from, to] : kNames)
      if (e.param() == from) {
        std::string msg = e.what();
        if (msg.rfind(from, 0) == 0) msg = to + msg.substr(std::string(from).size());
        throw ApiError(e.status(), msg, to, e.type());
      }
    throw;
  }
}

Json responses_usage(int64_t input_tokens, int64_t output_tokens, int64_t reasoning_tokens) {
  return Json{{"input_tokens", input_tokens},
              {"input_tokens_details", {{"cached_tokens", 0}}},
              {"output_tokens", output_tokens},
              {"output_tokens_details", {{"reasoning_tokens", std::max<int64_t>(reasoning_tokens, 0)}}},
              {"total_tokens", input_tokens + output_tokens}};
}

std::string sse_event(const Json& ev) {
  return "event: " + ev.value("type", std::string("message")) + "\ndata: " +
         ev.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

ResponsesStream::ResponsesStream(Json response) : response_(std::move(response)) {}

Json ResponsesStream::event(const char* type, Json fields) {
  Json e{{"type", type}};
  for (auto it = fields.begin(); it != fields.end(); ++it) e[it.key()] = *it;
  e["sequence_number"] = seq_++;
  return e;
}

std::vector<Json> ResponsesStream::start() {
  std::vector<Json> ev;
  ev.push_back(event("response.created", {{"response", response_}}));
  ev.push_back(event("response.in_progress", {{"response", response_}}));
  return ev;
}

void ResponsesStream::open(Kind k, std::vector<Json>& ev, const ToolCallDelta* call) {
  close(ev);
  kind_ = k;
  text_.clear();
  const int64_t oi = static_cast<int64_t>(response_["output"].size());
  if (k == Kind::Reasoning) {
    item_ = Json{{"id", ResponseMeta::make("rs_", "").id},
                 {"type", "reasoning"},
                 {"summary", Json::array()},
                 {"content", Json::array()},
                 {"status", "in_progress"}};
  } else if (k == Kind::Message) {
    item_ = Json{{"id", ResponseMeta::make("msg_", "").id},
                 {"type", "message"},
                 {"status", "in_progress"},
                 {"role", "assistant"},
                 {"content", Json::array()}};
  } else {
    call_index_ = call->index;
    item_ = Json{{"id", ResponseMeta::make("fc_", "").id},
                 {"type", "function_call"},
                 {"status", "in_progress"},
                 {"call_id", call->id},
                 {"name", call->name},
                 {"arguments", ""}};
  }
  ev.push_back(event("response.output_item.added", {{"output_index", oi}, {"item", item_}}));
  if (k == Kind::Reasoning)
    ev.push_back(event("response.content_part.added", {{"item_id", item_["id"]},
                                                        {"output_index", oi},
                                                        {"content_index", 0},
                                                        {"part", {{"type", "reasoning_text"}, {"text", ""}}}}));
  if (k == Kind::Message)
    ev.push_back(event("response.content_part.added",
                       {{"item_id", item_["id"]},
                        {"output_index", oi},
                        {"content_index", 0},
                        {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}}}}));
}

void ResponsesStream::close(std::vector<Json>& ev) {
  if (kind_ == Kind::None) return;
  const int64_t oi = static_cast<int64_t>(response_["output"].size());
  const Json id = item_["id"];
  if (kind_ == Kind::Reasoning) {
    const Json part{{"type", "reasoning_text"}, {"text", text_}};
    ev.push_back(event("response.reasoning_text.done",
                       {{"item_id", id}, {"output_index", oi}, {"content_index", 0}, {"text", text_}}));
    ev.push_back(
        event("response.content_part.done", {{"item_id", id}, {"output_index", oi}, {"content_index", 0}, {"part", part}}));
    item_["content"] = Json::array({part});
  } else if (kind_ == Kind::Message) {
    const Json part{{"type", "output_text"}, {"text", text_}, {"annotations", Json::array()}, {"logprobs", Json::array()}};
    ev.push_back(event("response.output_text.done", {{"item_id", id},
                                                     {"output_index", oi},
                                                     {"content_index", 0},
                                                     {"text", text_},
                                                     {"logprobs", Json::array()}}));
    ev.push_back(
        event("response.content_part.done", {{"item_id", id}, {"output_index", oi}, {"content_index", 0}, {"part", part}}));
    item_["content"] = Json::array({part});
  } else {
    item_["arguments"] = text_;
    ev.push_back(event("response.function_call_arguments.done",
                       {{"item_id", id}, {"output_index", oi}, {"name", item_["name"]}, {"arguments", text_}}));
  }
  item_["status"] = "completed";
  ev.push_back(event("response.output_item.done", {{"output_index", oi}, {"item", item_}}));
  response_["output"].push_back(item_);
  kind_ = Kind::None;
  call_index_ = -1;
}

std::vector<Json> ResponsesStream::push(const StreamDelta& d) {
  std::vector<Json> ev;
  auto oi = [&] { return static_cast<int64_t>(response_["output"].size()); };
  if (!d.reasoning.empty()) {
    if (kind_ != Kind::Reasoning) open(Kind::Reasoning, ev);
    text_ += d.reasoning;
    ev.push_back(event("response.reasoning_text.delta",
                       {{"item_id", item_["id"]}, {"output_index", oi()}, {"content_index", 0}, {"delta", d.reasoning}}));
  }
  if (!d.content.empty()) {
    if (kind_ != Kind::Message) open(Kind::Message, ev);
    text_ += d.content;
    ev.push_back(event("response.output_text.delta", {{"item_id", item_["id"]},
                                                      {"output_index", oi()},
                                                      {"content_index", 0},
                                                      {"delta", d.content},
                                                      {"logprobs", Json::array()}}));
  }
  for (const ToolCallDelta& c : d.tool_calls) {
    if (c.first || kind_ != Kind::Call || call_index_ != c.index) {
      if (!c.first) continue;  // a fragment of a call that is no longer open: cannot happen in order
      open(Kind::Call, ev, &c);
    }
    if (c.arguments.empty()) continue;
    text_ += c.arguments;
    ev.push_back(event("response.function_call_arguments.delta",
                       {{"item_id", item_["id"]}, {"output_index", oi()}, {"delta", c.arguments}}));
  }
  return ev;
}

std::vector<Json> ResponsesStream::finish(const std::string& incomplete_reason, const Json& usage) {
  std::vector<Json> ev;
  close(ev);
  response_["usage"] = usage;
  if (incomplete_reason.empty()) {
    response_["status"] = "completed";
    ev.push_back(event("response.completed", {{"response", response_}}));
  } else {
    response_["status"] = "incomplete";
    response_["incomplete_details"] = Json{{"reason", incomplete_reason}};
    ev.push_back(event("response.incomplete", {{"response", response_}}));
  }
  return ev;
}

Json responses_history(const Json& chat_messages, const Json& output_items) {
  Json h = chat_messages;
  Json m{{"role", "assistant"}, {"content", ""}};
  std::string reasoning;
  Json calls = Json::array();
  for (const auto& it : output_items) {
    const std::string t = it.value("type", "");
    if (t == "reasoning") {
      for (const auto& p : it["content"]) reasoning += p.value("text", "");
    } else if (t == "message") {
      std::string text;
      for (const auto& p : it["content"]) text += p.value("text", "");
      m["content"] = m["content"].get<std::string>() + text;
    } else if (t == "function_call") {
      calls.push_back(Json{{"id", it["call_id"]},
                           {"type", "function"},
                           {"function", {{"name", it["name"]}, {"arguments", it["arguments"]}}}});
    }
  }
  if (!reasoning.empty()) m["reasoning_content"] = reasoning;
  if (!calls.empty()) m["tool_calls"] = calls;
  h.push_back(std::move(m));
  return h;
}

void ResponseStore::put(const std::string& id, Json history) {
  if (cap_ == 0) return;
  std::lock_guard<std::mutex> lk(mu_);
  if (auto it = index_.find(id); it != index_.end()) {
    lru_.erase(it->second);
    index_.erase(it);
  }
  lru_.emplace_front(id, std::move(history));
  index_[id] = lru_.begin();
  while (lru_.size() > cap_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

std::optional<Json> ResponseStore::get(const std::string& id) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

std::size_t ResponseStore::size() {
  std::lock_guard<std::mutex> lk(mu_);
  return lru_.size();
}

// ---------------------------------------------------------------------------------------------
// Anthropic Messages

namespace {

std::string block_text(const Json& c, const std::string& w) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) throw bad_request("messages", w + ": expected a string or a list of blocks, found " + shown(c));
  std::string out;
  for (std::size_t j = 0; j < c.size(); ++j) {
    const Json& b = c[j];
    const std::string bw = w + "[" + std::to_string(j) + "]";
    if (!b.is_object() || !field(b, "type") || b["type"] != "text")
      throw bad_request("messages", bw + ": expected a text block {\"type\": \"text\", \"text\"}");
    if (!field(b, "text") || !b["text"].is_string()) throw bad_request("messages", bw + ".text: expected a string");
    out += b["text"].get<std::string>();
  }
  return out;
}

}  // namespace

MessagesTranslation translate_messages_request(const Json& body, bool count_only) {
  static const std::set<std::string> kAllowed = {
      "model",       "messages", "system", "max_tokens", "tools",    "tool_choice", "thinking", "stop_sequences",
      "temperature", "top_p",    "top_k",  "metadata",   "stream",   "service_tier", "k3_forced_output",
      "output_config"};
  refuse_unknown(body, kAllowed, "", "Messages");
  MessagesTranslation r;
  Json& cb = r.chat_body;
  cb = Json::object();
  const Json* model = field(body, "model");
  if (!model || !model->is_string()) throw bad_request("model", "model: required (a string)");
  r.model = *model;
  cb["model"] = *model;
  Json msgs = Json::array();
  if (const Json* s = field(body, "system")) msgs.push_back(Json{{"role", "system"}, {"content", block_text(*s, "system")}});

  const Json* ms = field(body, "messages");
  if (!ms || !ms->is_array() || ms->empty())
    throw bad_request("messages", "messages: required (a non-empty list of messages)");
  for (std::size_t i = 0; i < ms->size(); ++i) {
    const Json& m = (*ms)[i];
    const std::string w = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw bad_request("messages", w + ": expected an object, found " + shown(m));
    const std::string role = need_string(m, "role", w);
    if (role != "user" && role != "assistant")
      throw bad_request("messages", w + ".role: expected user or assistant, found \"" + role + "\"");
    const Json* c = field(m, "content");
    if (!c) throw bad_request("messages", w + ".content: required");
    if (c->is_string()) {
      msgs.push_back(Json{{"role", role}, {"content", *c}});
      continue;
    }
    if (!c->is_array()) throw bad_request("messages", w + ".content: expected a string or a list of blocks");
    std::string text, thinking;
    Json calls = Json::array();
    for (std::size_t j = 0; j < c->size(); ++j) {
      const Json& b = (*c)[j];
      const std::string bw = w + ".content[" + std::to_string(j) + "]";
      if (!b.is_object() || !field(b, "type") || !b["type"].is_string())
        throw bad_request("messages", bw + ": expected a content block with a \"type\"");
      const std::string t = b["type"];
      if (t == "text") {
        text += need_string(b, "text", bw);
      } else if (t == "tool_use" && role == "assistant") {
        const Json* input = field(b, "input");
        if (input && !input->is_object()) throw bad_request("messages", bw + ".input: expected an object");
        calls.push_back(Json{{"id", need_string(b, "id", bw)},
                             {"type", "function"},
                             {"function",
                              {{"name", need_string(b, "name", bw)},
                               {"arguments", input ? input->dump() : std::string("{}")}}}});
      } else if (t == "thinking" && role == "assistant") {
        thinking += need_string(b, "thinking", bw);
      } else if (t == "tool_result" && role == "user") {
        std::string out;
        if (const Json* rc = field(b, "content")) out = block_text(*rc, bw + ".content");
        if (const Json* e = field(b, "is_error"); e && *e == true) out = "[error] " + out;
        msgs.push_back(Json{{"role", "tool"}, {"tool_call_id", need_string(b, "tool_use_id", bw)}, {"content", out}});
      } else {
        throw bad_request("messages", bw + ".type: \"" + t + "\" is not supported in a " + role +
                                          " message (expected text" +
                                          (role == "user" ? ", tool_result)" : ", tool_use, thinking)"));
      }
    }
    if (role == "user") {
      if (!text.empty() || msgs.empty() || msgs.back()["role"] != "tool") msgs.push_back(Json{{"role", "user"}, {"content", text}});
    } else {
      Json a{{"role", "assistant"}, {"content", text}};
      if (!thinking.empty()) a["reasoning_content"] = thinking;
      if (!calls.empty()) a["tool_calls"] = calls;
      msgs.push_back(std::move(a));
    }
  }
  cb["messages"] = msgs;

  if (const Json* mt = field(body, "max_tokens")) {
    if (!mt->is_number_integer() || mt->get<int64_t>() < 1)
      throw bad_request("max_tokens", "max_tokens: expected an integer >= 1, found " + shown(*mt));
    cb["max_tokens"] = *mt;
  } else if (!count_only) {
    throw bad_request("max_tokens", "max_tokens: required (an integer >= 1)");
  }
  if (const Json* t = field(body, "temperature")) {
    if (!t->is_number() || t->get<double>() < 0 || t->get<double>() > 1)
      throw bad_request("temperature", "temperature: expected a number in [0, 1], found " + shown(*t));
    cb["temperature"] = *t;
  }
  for (const char* k : {"top_p", "top_k", "stream", "k3_forced_output"})
    if (const Json* v = field(body, k)) cb[k] = *v;
  if (const Json* ss = field(body, "stop_sequences")) {
    if (!ss->is_array()) throw bad_request("stop_sequences", "stop_sequences: expected a list of strings");
    for (const auto& s : *ss)
      if (!s.is_string()) throw bad_request("stop_sequences", "stop_sequences: expected a list of strings");
    cb["stop"] = *ss;
  }
  if (const Json* md = field(body, "metadata")) {
    if (!md->is_object()) throw bad_request("metadata", "metadata: expected an object");
    refuse_unknown(*md, {"user_id"}, "metadata.", "Messages");
    if (const Json* u = field(*md, "user_id")) {
      if (!u->is_string()) throw bad_request("metadata.user_id", "metadata.user_id: expected a string");
      cb["user"] = *u;
    }
  }
  if (const Json* st = field(body, "service_tier"); st && *st != "auto" && *st != "standard_only")
    throw bad_request("service_tier", "service_tier: expected auto or standard_only, found " + shown(*st));

  if (const Json* tools = field(body, "tools")) {
    if (!tools->is_array()) throw bad_request("tools", "tools: expected a list");
    Json out = Json::array();
    for (std::size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      const std::string w = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) throw bad_request("tools", w + ": expected an object");
      if (const Json* ty = field(t, "type"); ty && *ty != "custom")
        throw bad_request("tools", w + ".type: " + shown(*ty) + " is not supported (only client tools with input_schema)");
      refuse_unknown(t, {"type", "name", "description", "input_schema", "cache_control"}, w + ".", "Messages");
      Json fn{{"name", need_string(t, "name", w)}};
      if (const Json* d = field(t, "description")) fn["description"] = *d;
      const Json* schema = field(t, "input_schema");
      if (!schema || !schema->is_object()) throw bad_request("tools", w + ".input_schema: required (an object)");
      fn["parameters"] = *schema;
      out.push_back(Json{{"type", "function"}, {"function", fn}});
    }
    if (!out.empty()) cb["tools"] = out;
  }
  if (const Json* tc = field(body, "tool_choice")) {
    if (!tc->is_object() || !field(*tc, "type") || !(*tc)["type"].is_string())
      throw bad_request("tool_choice", "tool_choice: expected {\"type\": auto|any|tool|none}, found " + shown(*tc));
    refuse_unknown(*tc, {"type", "name", "disable_parallel_tool_use"}, "tool_choice.", "Messages");
    if (const Json* d = field(*tc, "disable_parallel_tool_use"); d && *d != false)
      throw bad_request("tool_choice.disable_parallel_tool_use",
                        "tool_choice.disable_parallel_tool_use: only false is supported (K3 may call several tools)");
    const std::string t = (*tc)["type"];
    if (t == "auto") cb["tool_choice"] = "auto";
    else if (t == "any") cb["tool_choice"] = "required";
    else if (t == "none") cb["tool_choice"] = "none";
    else if (t == "tool")
      cb["tool_choice"] = Json{{"type", "function"}, {"function", {{"name", need_string(*tc, "name", "tool_choice")}}}};
    else
      throw bad_request("tool_choice", "tool_choice.type: expected auto, any, tool or none, found \"" + t + "\"");
  }
  Json kwargs{{"thinking", false}};
  if (const Json* th = field(body, "thinking")) {
    if (!th->is_object() || !field(*th, "type"))
      throw bad_request("thinking", "thinking: expected {\"type\": \"enabled\", \"budget_tokens\"} or {\"type\": \"disabled\"}");
    refuse_unknown(*th, {"type", "budget_tokens", "display"}, "thinking.", "Messages");
    if (const Json* disp = field(*th, "display"); disp && *disp != "summarized")
      throw bad_request("thinking.display", "thinking.display: only \"summarized\" is supported (the thinking text is returned)");
    if ((*th)["type"] == "adaptive") {
      kwargs["thinking"] = true;
    } else if ((*th)["type"] == "enabled") {
      const Json* b = field(*th, "budget_tokens");
      if (!b || !b->is_number_integer() || b->get<int64_t>() < 1024)
        throw bad_request("thinking.budget_tokens", "thinking.budget_tokens: expected an integer >= 1024");
      const int64_t budget = b->get<int64_t>();
      if (const Json* mt = field(body, "max_tokens"); mt && mt->is_number_integer() && budget >= mt->get<int64_t>())
        throw bad_request("thinking.budget_tokens", "thinking.budget_tokens: must be less than max_tokens");
      kwargs["thinking"] = true;
      cb["reasoning_effort"] = budget < 4096 ? "low" : budget < 16384 ? "high" : "max";
    } else if ((*th)["type"] != "disabled") {
      throw bad_request("thinking.type",
                        "thinking.type: expected enabled, adaptive or disabled, found " + shown((*th)["type"]));
    }
  }
  if (const Json* oc = field(body, "output_config")) {
    if (!oc->is_object()) throw bad_request("output_config", "output_config: expected an object");
    refuse_unknown(*oc, {"effort", "format"}, "output_config.", "Messages");
    if (const Json* e = field(*oc, "effort")) {
      if (*e == "low") cb["reasoning_effort"] = "low";
      else if (*e == "medium" || *e == "high") cb["reasoning_effort"] = "high";
      else if (*e == "xhigh" || *e == "max") cb["reasoning_effort"] = "max";
      else
        throw bad_request("output_config.effort",
                          "output_config.effort: expected low, medium, high, xhigh or max, found " + shown(*e));
    }
    if (const Json* f = field(*oc, "format")) {
      if (!f->is_object() || !field(*f, "type") || (*f)["type"] != "json_schema" || !field(*f, "schema"))
        throw bad_request("output_config.format",
                          "output_config.format: expected {\"type\": \"json_schema\", \"schema\"}, found " + shown(*f));
      cb["response_format"] =
          Json{{"type", "json_schema"}, {"json_schema", {{"name", "output"}, {"schema", (*f)["schema"]}}}};
    }
  }
  cb["chat_template_kwargs"] = kwargs;
  return r;
}

Json anthropic_error_body(const ApiError& e) {
  const int s = e.status();
  const char* type = s == 400   ? "invalid_request_error"
                     : s == 401 ? "authentication_error"
                     : s == 403 ? "permission_error"
                     : s == 404 ? "not_found_error"
                     : s == 413 ? "request_too_large"
                     : s == 429 ? "rate_limit_error"
                     : s == 503 ? "overloaded_error"
                     : s < 500  ? "invalid_request_error"
                                : "api_error";
  return Json{{"type", "error"}, {"error", {{"type", type}, {"message", e.what()}}}};
}

MessagesStream::MessagesStream(Json message) : message_(std::move(message)) {}

std::vector<Json> MessagesStream::start(int64_t input_tokens) {
  message_["usage"] = Json{{"input_tokens", input_tokens}, {"output_tokens", 0}};
  return {Json{{"type", "message_start"}, {"message", message_}}, Json{{"type", "ping"}}};
}

void MessagesStream::open(Kind k, std::vector<Json>& ev, const ToolCallDelta* call) {
  close(ev);
  kind_ = k;
  text_.clear();
  ++index_;
  if (k == Kind::Thinking) {
    block_ = Json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}};
  } else if (k == Kind::Text) {
    block_ = Json{{"type", "text"}, {"text", ""}};
  } else {
    call_index_ = call->index;
    std::string id = call->id;
    if (id.rfind("call_", 0) == 0) id = "toolu_" + id.substr(5);
    block_ = Json{{"type", "tool_use"}, {"id", id}, {"name", call->name}, {"input", Json::object()}};
  }
  ev.push_back(Json{{"type", "content_block_start"}, {"index", index_}, {"content_block", block_}});
}

void MessagesStream::close(std::vector<Json>& ev) {
  if (kind_ == Kind::None) return;
  if (kind_ == Kind::Thinking) {
    block_["thinking"] = text_;
  } else if (kind_ == Kind::Text) {
    block_["text"] = text_;
  } else {
    Json input;
    if (json_depth_within(text_, kMaxJsonDepth)) input = Json::parse(text_, nullptr, /*allow_exceptions=*/false);
    block_["input"] = input.is_object() ? input : Json{{"arguments", text_}};
  }
  ev.push_back(Json{{"type", "content_block_stop"}, {"index", index_}});
  message_["content"].push_back(block_);
  kind_ = Kind::None;
  call_index_ = -1;
}

std::vector<Json> MessagesStream::push(const StreamDelta& d) {
  std::vector<Json> ev;
  if (!d.reasoning.empty()) {
    if (kind_ != Kind::Thinking) open(Kind::Thinking, ev);
    text_ += d.reasoning;
    ev.push_back(Json{{"type", "content_block_delta"},
                      {"index", index_},
                      {"delta", {{"type", "thinking_delta"}, {"thinking", d.reasoning}}}});
  }
  if (!d.content.empty()) {
    if (kind_ != Kind::Text) open(Kind::Text, ev);
    text_ += d.content;
    ev.push_back(Json{
        {"type", "content_block_delta"}, {"index", index_}, {"delta", {{"type", "text_delta"}, {"text", d.content}}}});
  }
  for (const ToolCallDelta& c : d.tool_calls) {
    if (c.first || kind_ != Kind::ToolUse || call_index_ != c.index) {
      if (!c.first) continue;
      open(Kind::ToolUse, ev, &c);
    }
    if (c.arguments.empty()) continue;
    text_ += c.arguments;
    ev.push_back(Json{{"type", "content_block_delta"},
                      {"index", index_},
                      {"delta", {{"type", "input_json_delta"}, {"partial_json", c.arguments}}}});
  }
  return ev;
}

std::vector<Json> MessagesStream::finish(const std::string& stop_reason, const std::string& stop_sequence,
                                         int64_t input_tokens, int64_t output_tokens) {
  std::vector<Json> ev;
  close(ev);
  message_["stop_reason"] = stop_reason;
  message_["stop_sequence"] = stop_sequence.empty() ? Json() : Json(stop_sequence);
  message_["usage"] = Json{{"input_tokens", input_tokens}, {"output_tokens", output_tokens}};
  ev.push_back(Json{{"type", "message_delta"},
                    {"delta", {{"stop_reason", stop_reason}, {"stop_sequence", message_["stop_sequence"]}}},
                    {"usage", {{"input_tokens", input_tokens}, {"output_tokens", output_tokens}}}});
  ev.push_back(Json{{"type", "message_stop"}});
  return ev;
}

}  // namespace k3::server
