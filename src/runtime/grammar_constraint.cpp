// k3::ConstraintCompiler / k3::ConstraintMatcher (runtime/grammar_constraint.h) over XGrammar.
#include "runtime/grammar_constraint.h"

#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace k3 {

// One piece of the constrained answer (file comment of grammar_constraint.h).
struct Segment {
  enum class Type { Forced, Grammar, ToolArgs, StopOnly };
  Type type = Type::Forced;
  std::vector<int32_t> ids;      // Forced: the ids, in order
  int grammar = -1;              // Grammar: index into CompiledConstraint::grammars
  std::vector<int32_t> end_ids;  // Grammar / ToolArgs: the ids that end it once complete
};

class CompiledConstraint {
 public:
  std::vector<xgrammar::CompiledGrammar> grammars;   // Grammar segments'
  std::vector<xgrammar::CompiledGrammar> tool_args;  // ToolCall: per tool, its arguments
  std::vector<std::string> tool_names;
  std::vector<Segment> segs;
  std::vector<int32_t> stop_ids;
  int32_t close_id = -1, open_id = -1, vocab = 0;
  bool after_think = false;
  const Tokenizer* tok = nullptr;  // ToolCall: decodes the chosen name
};

struct ConstraintCompiler::Impl {
  Impl(xgrammar::TokenizerInfo info, int n_threads) : compiler(info, n_threads, /*cache_enabled=*/true) {}
  xgrammar::GrammarCompiler compiler;
  std::vector<int32_t> stop_ids;
  int32_t close_id = -1, open_id = -1, vocab = 0;
  const Tokenizer* tok = nullptr;
  ConstraintLimits limits;
  mutable std::mutex mu;
  mutable double last_ms = 0;
};

namespace {

xgrammar::TokenizerInfo make_info(const Tokenizer& tok, const std::vector<int32_t>& stop_ids) {
  std::vector<std::string> vocab(static_cast<size_t>(tok.vocab_size()));
  // Specials stay "" (XGrammar's special ids: never allowed but as stop ids); reserved slots too.
  for (int32_t i = 0; i < tok.n_ranks(); ++i) vocab[static_cast<size_t>(i)] = std::string(tok.token_bytes(i));
  return xgrammar::TokenizerInfo(vocab, xgrammar::VocabType::RAW, tok.vocab_size(), stop_ids);
}

// XGrammar 0.2.8 parses but does not enforce these (it logs a warning and widens the schema):
// refused, so that no part of a schema is silently ignored.
const char* const kIgnoredKeywords[] = {"not",         "if",       "then",        "else",       "dependentRequired",
                                        "dependentSchemas", "uniqueItems", "contains", "minContains", "maxContains"};
const char* const kFormats[] = {"email", "date", "time", "date-time", "duration", "ipv4", "ipv6", "hostname", "uuid",
                                "uri", "uri-reference", "uri-template", "json-pointer", "relative-json-pointer"};

// Walks the schema nodes of `s` (at `path`, a JSON pointer) and throws for what XGrammar ignores.
void audit_schema(const nlohmann::json& s, const std::string& path, int depth) {
  if (depth > 64) throw Error("json schema: nested deeper than 64 schema levels at " + path);
  if (!s.is_object()) return;
  for (const char* k : kIgnoredKeywords)
    if (s.contains(k))
      throw Error(std::string("json schema: keyword \"") + k + "\" at " + path + " is not supported");
  if (auto f = s.find("format"); f != s.end()) {
    const std::string fmt = f->is_string() ? f->get<std::string>() : f->dump();
    if (std::find(std::begin(kFormats), std::end(kFormats), fmt) == std::end(kFormats))
      throw Error("json schema: format \"" + fmt.substr(0, 40) + "\" at " + path +
                  " is not supported (supported: email, date, time, date-time, duration, ipv4, ipv6, hostname, "
                  "uuid, uri, uri-reference, uri-template, json-pointer, relative-json-pointer)");
  }
  if ((s.contains("pattern") || s.contains("format")) && (s.contains("minLength") || s.contains("maxLength")))
    throw Error("json schema: minLength/maxLength together with pattern or format at " + path + " is not supported");
  if (auto a = s.find("allOf"); a != s.end() && a->is_array() && a->size() > 1)
    throw Error("json schema: allOf with more than one schema at " + path + " is not supported");
  for (const char* k : {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
    if (auto m = s.find(k); m != s.end() && m->is_object())
      for (auto it = m->begin(); it != m->end(); ++it)
        audit_schema(*it, path + "/" + k + "/" + it.key(), depth + 1);
  for (const char* k : {"items", "additionalProperties", "additionalItems", "propertyNames", "unevaluatedProperties",
                        "unevaluatedItems"})
    if (auto m = s.find(k); m != s.end()) {
      if (m->is_array()) {
        for (size_t i = 0; i < m->size(); ++i) audit_schema((*m)[i], path + "/" + k + "/" + std::to_string(i), depth + 1);
      } else {
        audit_schema(*m, path + "/" + k, depth + 1);
      }
    }
  for (const char* k : {"prefixItems", "anyOf", "oneOf", "allOf"})
    if (auto m = s.find(k); m != s.end() && m->is_array())
      for (size_t i = 0; i < m->size(); ++i) audit_schema((*m)[i], path + "/" + k + "/" + std::to_string(i), depth + 1);
}

}  // namespace

ConstraintCompiler::ConstraintCompiler(const Tokenizer& tok, std::vector<int32_t> stop_ids, int n_threads,
                                       ConstraintLimits limits) {
  if (stop_ids.empty()) throw Error("constraint compiler: at least one stop id is needed");
  for (int32_t s : stop_ids)
    if (s < 0 || s >= tok.vocab_size())
      throw Error("constraint compiler: stop id " + std::to_string(s) + " outside the vocabulary [0, " +
                  std::to_string(tok.vocab_size()) + ")");
  impl_ = std::make_unique<Impl>(make_info(tok, stop_ids), std::max(1, n_threads));
  impl_->stop_ids = std::move(stop_ids);
  impl_->tok = &tok;
  impl_->close_id = tok.close_id();
  impl_->open_id = tok.open_id();
  impl_->vocab = tok.vocab_size();
  impl_->limits = limits;
}

ConstraintCompiler::~ConstraintCompiler() = default;

int32_t ConstraintCompiler::vocab_size() const { return impl_->vocab; }

double ConstraintCompiler::last_compile_ms() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->last_ms;
}

namespace {

std::string clean_xgrammar_message(std::string m) {
  // XGrammar prefixes "[hh:mm:ss] path/file.cc:line: " and ends with a newline.
  if (!m.empty() && m[0] == '[') {
    const size_t cc = m.find(".cc:");
    const size_t colon = cc == std::string::npos ? cc : m.find(": ", cc + 4);
    if (colon != std::string::npos) m = m.substr(colon + 2);
  }
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  if (m.size() > 300) m = m.substr(0, 297) + "...";
  return m;
}

// Throws when no first token is allowed (an empty language).
void check_not_empty(const xgrammar::CompiledGrammar& g, int32_t vocab, const std::string& what) {
  xgrammar::GrammarMatcher probe(g);
  std::vector<int32_t> bits(static_cast<size_t>(xgrammar::GetBitmaskSize(vocab)));
  int64_t shape[1] = {static_cast<int64_t>(bits.size())};
  DLTensor t{};
  t.data = bits.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = shape;
  probe.FillNextTokenBitmask(&t);
  if (std::all_of(bits.begin(), bits.end(), [](int32_t w) { return w == 0; }))
    throw Error(what + ": no output satisfies it (the first token has no allowed id)");
}

void audit_schema_text(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("json schema: not valid JSON: ") + e.what());
  }
  audit_schema(j, "#", 0);
}

}  // namespace

std::shared_ptr<const CompiledConstraint> ConstraintCompiler::compile(const ConstraintSpec& spec) const {
  using Kind = ConstraintSpec::Kind;
  const std::string what = spec.kind == Kind::Gbnf ? "GBNF" : spec.kind == Kind::ToolCall ? "tool call" : "json schema";
  if (spec.kind == Kind::None) throw Error("constraint: nothing to compile (kind None)");
  size_t bytes = spec.text.size();
  for (const auto& t : spec.tools) bytes += t.name.size() + t.parameters.size();
  if (bytes > impl_->limits.max_text_bytes)
    throw Error(what + ": " + std::to_string(bytes) + " bytes exceeds the limit of " +
                std::to_string(impl_->limits.max_text_bytes) + " bytes");
  const auto t0 = std::chrono::steady_clock::now();
  auto c = std::make_shared<CompiledConstraint>();
  c->stop_ids = impl_->stop_ids;
  c->close_id = impl_->close_id;
  c->open_id = impl_->open_id;
  c->vocab = impl_->vocab;
  c->after_think = spec.after_think;
  c->tok = impl_->tok;
  auto forced = [&](const std::string& text) {
    Segment sg;
    sg.type = Segment::Type::Forced;
    sg.ids = impl_->tok->encode(text, AllowedSpecials::all());
    if (!sg.ids.empty()) c->segs.push_back(std::move(sg));
  };
  const std::string think_switch = spec.after_think ? "think<|sep|><|open|>response<|sep|>" : "";
  try {
    switch (spec.kind) {
      case Kind::JsonObject:
      case Kind::JsonSchema:
      case Kind::Gbnf: {
        if (spec.kind == Kind::JsonObject) {
          c->grammars.push_back(impl_->compiler.CompileJSONSchema(R"({"type": "object"})", /*any_whitespace=*/false,
                                                                  std::nullopt, std::nullopt, /*strict_mode=*/false));
        } else if (spec.kind == Kind::JsonSchema) {
          audit_schema_text(spec.text);
          c->grammars.push_back(impl_->compiler.CompileJSONSchema(spec.text, /*any_whitespace=*/false, std::nullopt,
                                                                  std::nullopt, spec.strict));
        } else {
          c->grammars.push_back(impl_->compiler.CompileGrammar(xgrammar::Grammar::FromEBNF(spec.text, "root")));
        }
        check_not_empty(c->grammars[0], c->vocab, what);
        forced(think_switch);
        Segment g;
        g.type = Segment::Type::Grammar;
        g.grammar = 0;
        g.end_ids = c->stop_ids;
        c->segs.push_back(std::move(g));
        break;
      }
      case Kind::ToolCall: {
        if (spec.tools.empty()) throw Error("no tools to call");
        std::string names;
        for (const auto& t : spec.tools) {
          if (t.name.empty() || t.name.find_first_of("\"&\\\n\r") != std::string::npos)
            throw Error("tool name \"" + t.name.substr(0, 40) + "\" cannot be constrained (empty, or holds \" & \\ or a newline)");
          names += std::string(names.empty() ? "" : " | ") + "\"" + t.name + "\"";
          const std::string schema = t.parameters.empty() ? R"({"type": "object"})" : t.parameters;
          try {
            audit_schema_text(schema);
            c->tool_args.push_back(impl_->compiler.CompileJSONSchema(schema, /*any_whitespace=*/false, std::nullopt,
                                                                     std::nullopt, /*strict_mode=*/false));
            check_not_empty(c->tool_args.back(), c->vocab, "json schema");
          } catch (const Error& e) {
            throw Error("tool \"" + t.name + "\" parameters: " + e.what());
          } catch (const std::exception& e) {
            throw Error("tool \"" + t.name + "\" parameters: json schema: " + clean_xgrammar_message(e.what()));
          }
          c->tool_names.push_back(t.name);
        }
        c->grammars.push_back(impl_->compiler.CompileGrammar(
            xgrammar::Grammar::FromEBNF("root ::= \"call tool=\\\"\" (" + names + ") \"\\\" index=\\\"1\\\"\"", "root")));
        forced(think_switch + "<|close|>response<|sep|><|open|>tools<|sep|><|open|>");
        Segment name;
        name.type = Segment::Type::Grammar;
        name.grammar = 0;
        name.end_ids = {impl_->tok->sep_id()};
        c->segs.push_back(std::move(name));
        forced("<|open|>json type=\"object\"<|sep|>");
        Segment args;
        args.type = Segment::Type::ToolArgs;
        args.end_ids = {impl_->close_id};
        c->segs.push_back(std::move(args));
        forced("json<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>");
        Segment stop;
        stop.type = Segment::Type::StopOnly;
        c->segs.push_back(std::move(stop));
        break;
      }
      case Kind::None:
        break;
    }
  } catch (const Error& e) {
    const std::string m = e.what();
    throw Error(m.rfind(what + ": ", 0) == 0 || m.rfind("json schema: ", 0) == 0 ? m : what + ": " + m);
  } catch (const std::exception& e) {
    throw Error(what + ": " + clean_xgrammar_message(e.what()));
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    impl_->last_ms = ms;
  }
  return c;
}

// ---- matcher ----

namespace {
enum class Phase : uint8_t { Think, Seg, Done };
struct Step {  // the state before an accepted id
  Phase phase;
  uint32_t seg, pos;
  int32_t grammar_seg;  // the segment whose matcher took the id, or -1
};
}  // namespace

struct ConstraintMatcher::Impl {
  explicit Impl(std::shared_ptr<const CompiledConstraint> cc)
      : c(std::move(cc)), matchers(c->segs.size()), bitmask(static_cast<size_t>(xgrammar::GetBitmaskSize(c->vocab))) {
    if (c->after_think) {
      phase = Phase::Think;
    } else {
      enter(0);
    }
  }
  std::shared_ptr<const CompiledConstraint> c;
  std::vector<std::optional<xgrammar::GrammarMatcher>> matchers;  // per segment, made on entering it
  std::vector<int32_t> bitmask;
  int32_t bitmask_seg = -1;  // the segment whose current mask `bitmask` holds (-1: stale)
  Phase phase = Phase::Seg;
  uint32_t seg = 0, pos = 0;
  std::vector<int32_t> name_ids;  // ToolCall: ids the name segment took
  std::vector<Step> history;

  const Segment& cur() const { return c->segs[seg]; }
  bool is_stop(int32_t id) const { return std::find(c->stop_ids.begin(), c->stop_ids.end(), id) != c->stop_ids.end(); }

  void enter(uint32_t s) {
    phase = s < c->segs.size() ? Phase::Seg : Phase::Done;
    seg = s;
    pos = 0;
    bitmask_seg = -1;
    for (size_t k = s; k < matchers.size(); ++k) matchers[k].reset();
    if (phase != Phase::Seg) return;
    const Segment& g = cur();
    if (g.type == Segment::Type::Grammar) {
      matchers[s].emplace(c->grammars[static_cast<size_t>(g.grammar)], g.end_ids);
    } else if (g.type == Segment::Type::ToolArgs) {
      std::vector<int32_t> ids = name_ids;
      const std::string text = c->tok->decode(ids);  // call tool="NAME" index="1"
      size_t tool = 0;
      for (size_t k = 0; k < c->tool_names.size(); ++k)
        if (text.find("tool=\"" + c->tool_names[k] + "\"") != std::string::npos) tool = k;
      matchers[s].emplace(c->tool_args[tool], g.end_ids);
    }
  }
  void fill() {
    if (bitmask_seg == static_cast<int32_t>(seg)) return;
    int64_t shape[1] = {static_cast<int64_t>(bitmask.size())};
    DLTensor t{};
    t.data = bitmask.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = xgrammar::GetBitmaskDLType();
    t.shape = shape;
    matchers[seg]->FillNextTokenBitmask(&t);
    bitmask_seg = static_cast<int32_t>(seg);
  }
  bool in_grammar() const {
    return phase == Phase::Seg && (cur().type == Segment::Type::Grammar || cur().type == Segment::Type::ToolArgs);
  }
  bool allows(int32_t id) {
    if (id < 0 || id >= c->vocab) return false;
    switch (phase) {
      case Phase::Think:
        return !is_stop(id) && id != c->open_id;
      case Phase::Done:
        return false;
      case Phase::Seg:
        break;
    }
    switch (cur().type) {
      case Segment::Type::Forced:
        return id == cur().ids[pos];
      case Segment::Type::StopOnly:
        return is_stop(id);
      default:
        fill();
        return (bitmask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1;
    }
  }
};

ConstraintMatcher::ConstraintMatcher(std::shared_ptr<const CompiledConstraint> c)
    : impl_(std::make_unique<Impl>(std::move(c))) {}
ConstraintMatcher::~ConstraintMatcher() = default;
ConstraintMatcher::ConstraintMatcher(ConstraintMatcher&&) noexcept = default;
ConstraintMatcher& ConstraintMatcher::operator=(ConstraintMatcher&&) noexcept = default;

void ConstraintMatcher::mask(std::span<float> logits) {
  Impl& s = *impl_;
  const float ninf = -std::numeric_limits<float>::infinity();
  const size_t n = logits.size();
  const size_t v = static_cast<size_t>(s.c->vocab);
  for (size_t i = v; i < n; ++i) logits[i] = ninf;
  const size_t lim = std::min(n, v);
  auto only = [&](const std::vector<int32_t>& keep) {
    std::vector<float> kept;
    for (int32_t id : keep) kept.push_back(static_cast<size_t>(id) < lim ? logits[static_cast<size_t>(id)] : ninf);
    std::fill(logits.begin(), logits.begin() + static_cast<std::ptrdiff_t>(lim), ninf);
    for (size_t k = 0; k < keep.size(); ++k)
      if (static_cast<size_t>(keep[k]) < lim) logits[static_cast<size_t>(keep[k])] = kept[k];
  };
  if (s.phase == Phase::Think) {
    for (int32_t id : s.c->stop_ids)
      if (static_cast<size_t>(id) < lim) logits[static_cast<size_t>(id)] = ninf;
    if (static_cast<size_t>(s.c->open_id) < lim) logits[static_cast<size_t>(s.c->open_id)] = ninf;
    return;
  }
  if (s.phase == Phase::Done) {
    std::fill(logits.begin(), logits.begin() + static_cast<std::ptrdiff_t>(lim), ninf);
    return;
  }
  switch (s.cur().type) {
    case Segment::Type::Forced:
      only({s.cur().ids[s.pos]});
      return;
    case Segment::Type::StopOnly:
      only(s.c->stop_ids);
      return;
    default:
      s.fill();
      for (size_t w = 0; w * 32 < lim; ++w) {
        const uint32_t bits = static_cast<uint32_t>(s.bitmask[w]);
        if (bits == 0xFFFFFFFFu) continue;
        const size_t end = std::min(lim, w * 32 + 32);
        for (size_t i = w * 32; i < end; ++i)
          if (!((bits >> (i - w * 32)) & 1u)) logits[i] = ninf;
      }
      return;
  }
}

bool ConstraintMatcher::allows(int32_t id) { return impl_->allows(id); }

void ConstraintMatcher::accept(int32_t id) {
  Impl& s = *impl_;
  if (!s.allows(id)) throw Error("constraint: id " + std::to_string(id) + " is not allowed by the grammar here");
  Step st{s.phase, s.seg, s.pos, -1};
  if (s.phase == Phase::Think) {
    s.history.push_back(st);
    if (id == s.c->close_id) s.enter(0);
    return;
  }
  switch (s.cur().type) {
    case Segment::Type::Forced:
      s.history.push_back(st);
      if (++s.pos == s.cur().ids.size()) s.enter(s.seg + 1);
      return;
    case Segment::Type::StopOnly:
      s.history.push_back(st);
      s.enter(s.seg + 1);
      return;
    default: {
      xgrammar::GrammarMatcher& m = *s.matchers[s.seg];
      if (!m.AcceptToken(id)) throw Error("constraint: the grammar matcher refused id " + std::to_string(id) + " (internal)");
      st.grammar_seg = static_cast<int32_t>(s.seg);
      s.history.push_back(st);
      s.bitmask_seg = -1;
      if (!s.c->tool_names.empty() && s.cur().type == Segment::Type::Grammar) s.name_ids.push_back(id);
      if (m.IsTerminated()) s.enter(s.seg + 1);
      return;
    }
  }
}

void ConstraintMatcher::rollback(int64_t n) {
  Impl& s = *impl_;
  if (n < 0 || n > static_cast<int64_t>(s.history.size()))
    throw Error("constraint: cannot roll back " + std::to_string(n) + " ids (" + std::to_string(s.history.size()) +
                " accepted)");
  for (int64_t i = 0; i < n; ++i) {
    const Step st = s.history.back();
    s.history.pop_back();
    // Segments after the restored one lose their matchers (remade on entering them again).
    for (size_t k = st.seg + 1; k < s.matchers.size(); ++k) s.matchers[k].reset();
    if (st.phase == Phase::Think)
      for (auto& m : s.matchers) m.reset();
    if (st.grammar_seg >= 0) {
      s.matchers[static_cast<size_t>(st.grammar_seg)]->Rollback(1);
      const Segment& g = s.c->segs[static_cast<size_t>(st.grammar_seg)];
      if (g.type == Segment::Type::Grammar && !s.c->tool_names.empty() && !s.name_ids.empty()) s.name_ids.pop_back();
    }
    s.phase = st.phase;
    s.seg = st.seg;
    s.pos = st.pos;
    if (s.phase == Phase::Seg && !s.matchers[s.seg] &&
        (s.cur().type == Segment::Type::Grammar || s.cur().type == Segment::Type::ToolArgs)) {
      // Restored into a segment at its start whose matcher was dropped: make it again.
      const uint32_t keep_pos = s.pos;
      s.enter(s.seg);
      s.pos = keep_pos;
    }
    s.bitmask_seg = -1;
  }
}

bool ConstraintMatcher::terminated() const { return impl_->phase == Phase::Done; }

int64_t ConstraintMatcher::accepted() const { return static_cast<int64_t>(impl_->history.size()); }

}  // namespace k3
