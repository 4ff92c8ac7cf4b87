// Incremental parsers of generated ids into OpenAI deltas (reasoning_content, content,
// tool_calls), one id at a time, for streaming and non-streaming responses alike.
//
// K3StreamParser follows parse_k3_output (tokenizer/chat_output.h, spec tokenizer.md §4.5)
// exactly, but emits as it goes: text of the think channel -> reasoning, of the response channel
// -> content, and each `<|open|>call tool="NAME"…` block -> a tool call whose arguments are
// streamed as a JSON object text, one fragment per argument (`{"city": "Paris"`, `, "days": 3`,
// `}`), formatted like Python's json.dumps (", " and ": " separators) as vLLM's kimi_k3 parser
// does. An argument whose JSON text nests deeper than kMaxJsonDepth (core/json_depth.h) is
// passed on as a JSON string holding that text, as text that does not parse is; a
// `<|open|>json` block is the arguments text verbatim, however deep. Text never splits a UTF-8 character across deltas: incomplete trailing bytes are held
// back until completed (or, at finish(), replaced by U+FFFD), so no delta holds a U+FFFD for a
// character that is still arriving.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace k3::server {

/// One piece of a tool call. The first piece of call `index` has `first` set and carries id and
/// name (arguments ""); later pieces carry argument text fragments only.
struct ToolCallDelta {
  int index = 0;
  bool first = false;
  std::string id;         ///< "call_" + 24 random alphanumerics (first piece only)
  std::string name;       ///< function name (first piece only)
  std::string arguments;  ///< fragment of the arguments JSON text
};

/// What one id (or the end) adds to the answer. Strings are valid UTF-8.
struct StreamDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
  /// Appends `o` (text concatenated, tool-call pieces appended).
  void append(const StreamDelta& o);
};

/// A finished tool call (the concatenation of its pieces).
struct ToolCall {
  std::string id, name, arguments;
};

/// Turns generated ids into deltas. One per sequence; not thread-safe.
class OutputDecoder {
 public:
  virtual ~OutputDecoder() = default;
  /// Adds one generated id. Errors: k3::Error for an id outside the vocabulary.
  virtual StreamDelta push(int32_t id) = 0;
  /// Ends the output (truncated or stopped): returns what was held back.
  virtual StreamDelta finish() = 0;
  /// Ids that were reasoning text (usage.completion_tokens_details.reasoning_tokens).
  virtual int64_t reasoning_tokens() const { return 0; }
  /// Every tool call seen so far (arguments complete only after its close / finish()).
  virtual const std::vector<ToolCall>& tool_calls() const { return no_calls_; }

 private:
  std::vector<ToolCall> no_calls_;
};

/// K3 chat output -> reasoning / content / tool calls (see the file comment).
class K3StreamParser : public OutputDecoder {
 public:
  /// prompt_opened_think: the prompt ended with <|open|>think<|sep|>, so text before any marker
  /// is reasoning (else content). The tokenizer must outlive the parser.
  K3StreamParser(const Tokenizer& tok, bool prompt_opened_think);
  StreamDelta push(int32_t id) override;
  StreamDelta finish() override;
  int64_t reasoning_tokens() const override { return n_reasoning_; }
  const std::vector<ToolCall>& tool_calls() const override { return calls_; }

 private:
  enum class Channel { Reasoning, Content, Argument, Json, None };
  enum class Mode { Body, OpenTag, CloseTag };
  void on_tag(bool open, StreamDelta& d);
  void finish_argument(StreamDelta& d);
  void finish_json(StreamDelta& d);
  void close_call(StreamDelta& d);
  void add_args(StreamDelta& d, const std::string& frag);

  const Tokenizer* tok_;
  StreamDecoder reasoning_dec_, content_dec_;
  Channel ch_;
  Mode mode_ = Mode::Body;
  std::string tag_, arg_key_, arg_type_, arg_value_, json_raw_;
  std::vector<ToolCall> calls_;
  bool call_open_ = false, args_started_ = false, call_raw_ = false;
  bool stopped_ = false;
  int64_t n_reasoning_ = 0;
};

/// Raw completion text (like `k3 run`): every id's bytes, specials flagged special=true dropped,
/// as content.
class PlainTextDecoder : public OutputDecoder {
 public:
  explicit PlainTextDecoder(const Tokenizer& tok) : dec_(tok, /*skip_special=*/true) {}
  StreamDelta push(int32_t id) override;
  StreamDelta finish() override;

 private:
  StreamDecoder dec_;
};

/// Python json.dumps-style text of one value (", " and ": " separators, non-ASCII kept).
/// Errors: k3::Error for arrays/objects nested deeper than kMaxJsonDepth (core/json_depth.h).
std::string py_json_dumps(const nlohmann::ordered_json& v);

/// A fresh tool-call id: "call_" + 24 random [a-zA-Z0-9].
std::string new_tool_call_id();

}  // namespace k3::server
