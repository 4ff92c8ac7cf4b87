// Grammar-constrained decoding (structured outputs): a per-tokenizer compiler turns a constraint
// spec (any JSON value, a JSON schema, a GBNF grammar) into a CompiledConstraint with XGrammar
// 0.2.8 (Apache-2.0; .deps/xgrammar-0.2.8, scripts/fetch_xgrammar.sh), and a per-sequence
// ConstraintMatcher masks each step's logits to the ids the grammar allows, accepts the picked id,
// and rolls back ids a speculative verify did not keep.
//
// The K3 output channels (spec tokenizer.md §4.5): after a prompt that opened the think channel the
// model writes free reasoning, then `<|close|>think<|sep|><|open|>response<|sep|>` and the answer.
// The matcher follows that structure:
//   Think     (only when the prompt opened think): any id but the stop ids and <|open|>; a
//             <|close|> moves on to Forced.
//   Forced    the ids of `think<|sep|><|open|>response<|sep|>` (the rest of the channel switch),
//             one allowed id each.
//   Grammar   the grammar's mask (JSON kinds: compact JSON, XGrammar's separators ", " and ": ",
//             no other whitespace between tokens); once the grammar is complete only the stop ids are allowed,
//             and accepting one terminates the matcher (the sequence ends with finish "stop").
// A prompt that opened the response channel (thinking off) starts in Grammar. Special ids other
// than the stop ids are never allowed inside the grammar: they are vocabulary entries with no text.
//
// A ToolCall constrains the answer to one tool call in the K3 tools channel, its arguments as a
// JSON block (a form chat_output.h parses):
//   [think...<|close|>think<|sep|><|open|>response<|sep|>]<|close|>response<|sep|>
//   <|open|>tools<|sep|><|open|>call tool="NAME" index="1"<|sep|><|open|>json type="object"<|sep|>
//   ARGS<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>STOP
// NAME is one of the tools (a grammar), ARGS a JSON object of that tool's parameters schema;
// everything else is forced, and only a stop id may follow.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace k3 {

/// What a sequence's response channel is constrained to.
struct ConstraintSpec {
  enum class Kind {
    None,        ///< no constraint
    JsonObject,  ///< any JSON object (OpenAI response_format json_object)
    JsonSchema,  ///< `text` = a JSON Schema (JSON text); OpenAI response_format json_schema
    Gbnf,        ///< `text` = a GBNF grammar (llama.cpp's dialect, root rule `root`)
    ToolCall,    ///< one call of one of `tools` in the K3 tools channel (OpenAI tool_choice
                 ///< "required" or a named function), its arguments a JSON object of the
                 ///< tool's parameters schema (file comment)
  };
  /// A tool a ToolCall may call: its name (no `"` or `&`) and its parameters JSON Schema text
  /// ("" = any JSON object).
  struct Tool {
    std::string name;
    std::string parameters;
  };
  Kind kind = Kind::None;
  std::string text;
  std::vector<Tool> tools;  ///< ToolCall: at least one
  /// JsonSchema: false lets objects carry properties the schema does not name when the schema
  /// does not set additionalProperties (XGrammar's strict_mode = false).
  bool strict = true;
  /// The prompt opened the think channel: the matcher starts in Think (file comment).
  bool after_think = false;
  bool empty() const { return kind == Kind::None; }
};

/// Limits on what compile() accepts (a bounded compile time; larger inputs are refused).
struct ConstraintLimits {
  size_t max_text_bytes = 64 * 1024;  ///< schema / grammar text
};

/// A compiled grammar for one tokenizer, shared (read-only) by the sequences that use it.
class CompiledConstraint;

/// Compiles constraint specs for one tokenizer. Thread-safe (XGrammar's compiler locks its cache).
class ConstraintCompiler {
 public:
  /// `tok`: the tokenizer whose ids the masks cover ([0, tok.vocab_size())); `stop_ids`: the ids
  /// that end a constrained answer (K3: <|end_of_msg|> and [EOS]). `n_threads`: compile threads.
  ConstraintCompiler(const Tokenizer& tok, std::vector<int32_t> stop_ids, int n_threads = 1,
                     ConstraintLimits limits = {});
  ~ConstraintCompiler();
  ConstraintCompiler(const ConstraintCompiler&) = delete;
  ConstraintCompiler& operator=(const ConstraintCompiler&) = delete;

  /// Compiles `spec` (kind != None). Errors: k3::Error whose message starts with what was wrong
  /// ("json schema: ...", "GBNF: ...", "... exceeds N bytes") for text over the limit, a schema
  /// that is not valid JSON or that XGrammar cannot convert (an unsatisfiable range, an empty
  /// enum, an unresolved $ref), a schema using what XGrammar would ignore (not, if/then/else,
  /// dependentRequired/dependentSchemas, uniqueItems, contains/minContains/maxContains, allOf
  /// of more than one schema, a format outside its list, minLength/maxLength with pattern or
  /// format), schema nesting deeper than 64 levels, a GBNF grammar that does not parse, or a
  /// grammar whose first token has no allowed id.
  std::shared_ptr<const CompiledConstraint> compile(const ConstraintSpec& spec) const;

  int32_t vocab_size() const;
  double last_compile_ms() const;  ///< wall time of the latest compile() in this object

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The per-sequence state: which ids the next step may pick. Not thread-safe.
class ConstraintMatcher {
 public:
  explicit ConstraintMatcher(std::shared_ptr<const CompiledConstraint> c);
  ~ConstraintMatcher();
  ConstraintMatcher(ConstraintMatcher&&) noexcept;
  ConstraintMatcher& operator=(ConstraintMatcher&&) noexcept;

  /// Sets logits[id] = -inf for every id the next step may not pick (ids >= the tokenizer's
  /// vocabulary included). logits: one row [n] fp32, any n >= 1. After terminated(): every id
  /// is masked. Cost: one XGrammar bitmask fill (docs/performance.md).
  void mask(std::span<float> logits);
  /// Whether the next step may pick `id`.
  bool allows(int32_t id);
  /// Moves past `id`. Errors: k3::Error when `id` is not allowed (the state is unchanged).
  void accept(int32_t id);
  /// Undoes the last `n` accepted ids (0 <= n <= accepted()). Errors: k3::Error past that.
  void rollback(int64_t n);
  /// A stop id was accepted after a complete grammar.
  bool terminated() const;
  int64_t accepted() const;  ///< ids accepted so far (and not rolled back)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace k3
