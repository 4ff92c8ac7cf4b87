// K3StreamParser: parse_k3_output's state machine, emitting deltas as ids arrive.
#include "stream_parser.h"

#include <nlohmann/json.hpp>

#include <random>

#include "core/error.h"
#include "core/json_depth.h"
#include "tokenizer/chat_output.h"
#include "tokenizer/utf8.h"

namespace k3::server {
namespace {

using OJ = nlohmann::ordered_json;

std::string dump(const OJ& v) { return v.dump(-1, ' ', false, OJ::error_handler_t::replace); }

}  // namespace

void StreamDelta::append(const StreamDelta& o) {
  reasoning += o.reasoning;
  content += o.content;
  tool_calls.insert(tool_calls.end(), o.tool_calls.begin(), o.tool_calls.end());
}

namespace {

// depth: arrays/objects around v. Recursion is bounded by kMaxJsonDepth.
std::string py_json_dumps_at(const OJ& v, int depth) {
  if ((v.is_object() || v.is_array()) && depth >= kMaxJsonDepth)
    throw Error("JSON: a value nested deeper than " + std::to_string(kMaxJsonDepth) + " levels cannot be printed");
  if (v.is_object()) {
    std::string s = "{";
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      if (!first) s += ", ";
      first = false;
      s += dump(OJ(k)) + ": " + py_json_dumps_at(x, depth + 1);
    }
    return s + "}";
  }
  if (v.is_array()) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + py_json_dumps_at(v[i], depth + 1);
    return s + "]";
  }
  return dump(v);
}

}  // namespace

std::string py_json_dumps(const OJ& v) { return py_json_dumps_at(v, 0); }

std::string new_tool_call_id() {
  static const char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{(static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id.push_back(kAlnum[rng() % 62]);
  return id;
}

K3StreamParser::K3StreamParser(const Tokenizer& tok, bool prompt_opened_think)
    : tok_(&tok),
      reasoning_dec_(tok),
      content_dec_(tok),
      ch_(prompt_opened_think ? Channel::Reasoning : Channel::Content) {}

void K3StreamParser::add_args(StreamDelta& d, const std::string& frag) {
  if (calls_.empty() || frag.empty()) return;
  calls_.back().arguments += frag;
  ToolCallDelta t;
  t.index = static_cast<int>(calls_.size()) - 1;
  t.arguments = frag;
  d.tool_calls.push_back(std::move(t));
}

void K3StreamParser::finish_argument(StreamDelta& d) {
  if (!call_open_ || call_raw_) return;
  const std::string v = tok::utf8_sanitize(arg_value_);
  OJ value;
  if (arg_type_ == "string" || !json_depth_within(v)) {
    value = v;  // too deep to hold as a value: passed on as a JSON string, as unparsable text is
  } else {
    try {
      value = OJ::parse(v);
    } catch (const OJ::exception&) {
      value = v;  // as parse_k3_output: keep unparsable text as a string
    }
  }
  add_args(d, std::string(args_started_ ? ", " : "{") + dump(OJ(arg_key_)) + ": " + py_json_dumps(value));
  args_started_ = true;
  arg_value_.clear();
}

void K3StreamParser::finish_json(StreamDelta& d) {
  if (!call_open_ || args_started_) return;
  // A raw json block is the whole arguments text (kept verbatim when it does not parse).
  call_raw_ = true;
  add_args(d, tok::utf8_sanitize(json_raw_));
  json_raw_.clear();
}

void K3StreamParser::close_call(StreamDelta& d) {
  if (!call_open_) return;
  if (!call_raw_) add_args(d, args_started_ ? "}" : "{}");
  call_open_ = false;
}

void K3StreamParser::on_tag(bool open, StreamDelta& d) {
  const K3Tag t = parse_k3_tag(tok::utf8_sanitize(tag_));
  if (open) {
    if (t.name == "think") ch_ = Channel::Reasoning;
    else if (t.name == "response") ch_ = Channel::Content;
    else if (t.name == "call") {
      close_call(d);  // an unclosed previous call
      calls_.push_back({new_tool_call_id(), t.attr("tool"), ""});
      call_open_ = true;
      args_started_ = call_raw_ = false;
      ToolCallDelta h;
      h.index = static_cast<int>(calls_.size()) - 1;
      h.first = true;
      h.id = calls_.back().id;
      h.name = calls_.back().name;
      d.tool_calls.push_back(std::move(h));
      ch_ = Channel::None;
    } else if (t.name == "argument") {
      arg_key_ = t.attr("key");
      arg_type_ = t.attr("type");
      arg_value_.clear();
      ch_ = Channel::Argument;
    } else if (t.name == "json") {
      json_raw_.clear();
      ch_ = Channel::Json;
    } else {
      ch_ = Channel::None;  // tools, a stray message open, unknown tags
    }
  } else {
    if (t.name == "argument" && ch_ == Channel::Argument) finish_argument(d);
    if (t.name == "json" && ch_ == Channel::Json) finish_json(d);
    if (t.name == "call") close_call(d);
    ch_ = Channel::None;
  }
}

StreamDelta K3StreamParser::push(int32_t id) {
  StreamDelta d;
  const std::string_view bytes = tok_->token_bytes(id);  // range check first
  if (stopped_) return d;
  if (id == tok_->end_of_msg_id() || id == tok_->eos_id()) {
    stopped_ = true;
    return d;
  }
  if (id == tok_->open_id() || id == tok_->close_id()) {
    mode_ = id == tok_->open_id() ? Mode::OpenTag : Mode::CloseTag;
    tag_.clear();
    return d;
  }
  if (id == tok_->sep_id() && mode_ != Mode::Body) {
    on_tag(mode_ == Mode::OpenTag, d);
    mode_ = Mode::Body;
    return d;
  }
  if (mode_ != Mode::Body) {
    tag_.append(bytes);
    return d;
  }
  if (tok_->is_special(id)) return d;  // stray markers and other specials carry no text
  switch (ch_) {
    case Channel::Reasoning:
      d.reasoning = reasoning_dec_.push(id);
      ++n_reasoning_;
      break;
    case Channel::Content: d.content = content_dec_.push(id); break;
    case Channel::Argument: arg_value_.append(bytes); break;
    case Channel::Json: json_raw_.append(bytes); break;
    case Channel::None: break;
  }
  return d;
}

StreamDelta K3StreamParser::finish() {
  StreamDelta d;
  // Truncated inside an argument or json block: keep what was generated (as parse_k3_output).
  if (ch_ == Channel::Argument) finish_argument(d);
  if (ch_ == Channel::Json) finish_json(d);
  close_call(d);
  ch_ = Channel::None;
  d.reasoning = reasoning_dec_.flush();
  d.content = content_dec_.flush();
  return d;
}

StreamDelta PlainTextDecoder::push(int32_t id) {
  StreamDelta d;
  d.content = dec_.push(id);
  return d;
}

StreamDelta PlainTextDecoder::finish() {
  StreamDelta d;
  d.content = dec_.flush();
  return d;
}

}  // namespace k3::server
