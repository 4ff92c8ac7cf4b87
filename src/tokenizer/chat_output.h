// Parser for K3 model output (spec tokenizer.md §4.5): generated ids -> reasoning, content,
// tool calls. Works on ids, so only the atomic marker ids are structure; marker spellings
// produced as ordinary text stay text.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace k3 {

/// One parsed tool call.
struct ParsedToolCall {
  std::string name;
  /// Arguments object in generation order: `string` arguments as JSON strings, others parsed
  /// from their JSON text (kept as a string if that text does not parse or nests deeper than
  /// kMaxJsonDepth, core/json_depth.h); for a `<|open|>json type="object"<|sep|>RAW` block, RAW
  /// parsed (or null if it does not parse or nests deeper than kMaxJsonDepth).
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
  std::string raw_arguments;  ///< RAW of a json block, else empty
};

/// What the model produced.
struct ParsedOutput {
  std::string reasoning;  ///< think channel (UTF-8, invalid bytes replaced by U+FFFD)
  std::string content;    ///< response channel
  std::vector<ParsedToolCall> tool_calls;
  bool stopped = false;        ///< ended on <|end_of_msg|> or [EOS]
  int32_t stop_id = -1;        ///< the id that stopped it, or -1
  std::size_t n_consumed = 0;  ///< ids read, including the stop id
};

/// The text between an <|open|> (or <|close|>) marker and <|sep|> (spec tokenizer.md §4.5):
/// NAME then ` KEY="VALUE"` attributes, e.g. `call tool="get_weather" index="0"` -> name "call",
/// attrs [("tool", "get_weather"), ("index", "0")]; values have &quot; and &amp; unescaped.
struct K3Tag {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attrs;  ///< in order of appearance
  std::string attr(const std::string& key) const;          ///< value, or "" when absent
};

/// Parses a tag's text (UTF-8). Never throws: malformed attributes end the attribute list.
K3Tag parse_k3_tag(const std::string& text);

/// Parses ids generated after a K3 prompt. `prompt_opened_think`: the prompt ended with
/// `<|open|>think<|sep|>` (thinking on, the default), so text before any marker is reasoning;
/// otherwise it ended with `<|open|>response<|sep|>` and such text is content. Output that
/// stops without a close marker keeps its current channel. An `<|open|>response` or
/// `<|open|>tools` arriving while in reasoning ends the reasoning (vLLM #53246). Parsing stops
/// at the first <|end_of_msg|> or [EOS]. Other special ids (e.g. [BOS]) are dropped.
/// Errors: k3::Error for ids outside [0, vocab_size).
ParsedOutput parse_k3_output(const Tokenizer& tok, const std::vector<int32_t>& ids, bool prompt_opened_think = true);

}  // namespace k3
