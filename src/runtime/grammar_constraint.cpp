// k3::ConstraintCompiler / k3::ConstraintMatcher (runtime/grammar_constraint.h) over XGrammar.
#include "runtime/grammar_constraint.h"

#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace k3 {

class CompiledConstraint {
 public:
  CompiledConstraint(xgrammar::CompiledGrammar g, std::vector<int32_t> stop_ids, std::vector<int32_t> switch_ids,
                     int32_t close_id, int32_t open_id, bool after_think, int32_t vocab)
      : grammar(std::move(g)),
        stop_ids(std::move(stop_ids)),
        switch_ids(std::move(switch_ids)),
        close_id(close_id),
        open_id(open_id),
        after_think(after_think),
        vocab(vocab) {}
  xgrammar::CompiledGrammar grammar;
  std::vector<int32_t> stop_ids;
  std::vector<int32_t> switch_ids;  // think<|sep|><|open|>response<|sep|>
  int32_t close_id, open_id;
  bool after_think;
  int32_t vocab;
};

struct ConstraintCompiler::Impl {
  Impl(xgrammar::TokenizerInfo info, int n_threads) : compiler(info, n_threads, /*cache_enabled=*/true) {}
  xgrammar::GrammarCompiler compiler;
  std::vector<int32_t> stop_ids, switch_ids;
  int32_t close_id = -1, open_id = -1, vocab = 0;
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
  impl_->switch_ids = tok.encode("think<|sep|><|open|>response<|sep|>", AllowedSpecials::all());
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

std::shared_ptr<const CompiledConstraint> ConstraintCompiler::compile(const ConstraintSpec& spec) const {
  const char* what = spec.kind == ConstraintSpec::Kind::Gbnf ? "GBNF" : "json schema";
  if (spec.kind == ConstraintSpec::Kind::None) throw Error("constraint: nothing to compile (kind None)");
  if (spec.text.size() > impl_->limits.max_text_bytes)
    throw Error(std::string(what) + ": " + std::to_string(spec.text.size()) + " bytes exceeds the limit of " +
                std::to_string(impl_->limits.max_text_bytes) + " bytes");
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<xgrammar::CompiledGrammar> g;
  try {
    switch (spec.kind) {
      case ConstraintSpec::Kind::JsonObject:
        g = impl_->compiler.CompileJSONSchema(R"({"type": "object"})", /*any_whitespace=*/false, std::nullopt,
                                              std::nullopt, /*strict_mode=*/false);
        break;
      case ConstraintSpec::Kind::JsonSchema: {
        nlohmann::json j;
        try {
          j = nlohmann::json::parse(spec.text);
        } catch (const nlohmann::json::exception& e) {
          throw Error(std::string("not valid JSON: ") + e.what());
        }
        audit_schema(j, "#", 0);
      }
        g = impl_->compiler.CompileJSONSchema(spec.text, /*any_whitespace=*/false, std::nullopt, std::nullopt,
                                              spec.strict);
        break;
      case ConstraintSpec::Kind::Gbnf:
        g = impl_->compiler.CompileGrammar(xgrammar::Grammar::FromEBNF(spec.text, "root"));
        break;
      case ConstraintSpec::Kind::None:
        break;
    }
  } catch (const Error& e) {
    const std::string m = e.what();
    throw Error(m.rfind("json schema: ", 0) == 0 ? m : std::string(what) + ": " + m);
  } catch (const std::exception& e) {
    std::string m = e.what();
    // XGrammar prefixes "[hh:mm:ss] path/file.cc:line: " and ends with a newline.
    if (!m.empty() && m[0] == '[') {
      const size_t cc = m.find(".cc:");
      const size_t colon = cc == std::string::npos ? cc : m.find(": ", cc + 4);
      if (colon != std::string::npos) m = m.substr(colon + 2);
    }
    while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
    if (m.size() > 300) m = m.substr(0, 297) + "...";
    throw Error(std::string(what) + ": " + m);
  }
  // A grammar whose language is empty (a contradictory schema, `{"enum": []}`) would leave a
  // sequence no id to pick: refused here.
  {
    xgrammar::GrammarMatcher probe(*g);
    std::vector<int32_t> bits(static_cast<size_t>(xgrammar::GetBitmaskSize(impl_->vocab)));
    int64_t shape[1] = {static_cast<int64_t>(bits.size())};
    DLTensor t{};
    t.data = bits.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = xgrammar::GetBitmaskDLType();
    t.shape = shape;
    probe.FillNextTokenBitmask(&t);
    if (std::all_of(bits.begin(), bits.end(), [](int32_t w) { return w == 0; }))
      throw Error(std::string(what) + ": no output satisfies it (the first token has no allowed id)");
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    impl_->last_ms = ms;
  }
  return std::make_shared<const CompiledConstraint>(std::move(*g), impl_->stop_ids, impl_->switch_ids,
                                                    impl_->close_id, impl_->open_id, spec.after_think, impl_->vocab);
}

// ---- matcher ----

namespace {
enum class Phase : uint8_t { Think, Forced, Grammar };
struct Step {  // the state before an accepted id
  Phase phase;
  uint32_t forced_pos;
};
}  // namespace

struct ConstraintMatcher::Impl {
  explicit Impl(std::shared_ptr<const CompiledConstraint> cc)
      : c(std::move(cc)), m(c->grammar), bitmask(static_cast<size_t>(xgrammar::GetBitmaskSize(c->vocab))) {
    phase = c->after_think ? Phase::Think : Phase::Grammar;
  }
  std::shared_ptr<const CompiledConstraint> c;
  xgrammar::GrammarMatcher m;
  std::vector<int32_t> bitmask;
  bool bitmask_fresh = false;
  Phase phase;
  uint32_t forced_pos = 0;
  std::vector<Step> history;

  bool is_stop(int32_t id) const { return std::find(c->stop_ids.begin(), c->stop_ids.end(), id) != c->stop_ids.end(); }
  void fill() {
    if (bitmask_fresh) return;
    int64_t shape[1] = {static_cast<int64_t>(bitmask.size())};
    DLTensor t{};
    t.data = bitmask.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = xgrammar::GetBitmaskDLType();
    t.shape = shape;
    t.strides = nullptr;
    t.byte_offset = 0;
    m.FillNextTokenBitmask(&t);
    bitmask_fresh = true;
  }
  bool allows(int32_t id) {
    if (id < 0 || id >= c->vocab) return false;
    switch (phase) {
      case Phase::Think:
        return !is_stop(id) && id != c->open_id;
      case Phase::Forced:
        return id == c->switch_ids[forced_pos];
      case Phase::Grammar:
        if (m.IsTerminated()) return false;
        fill();
        return (bitmask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1;
    }
    return false;
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
  switch (s.phase) {
    case Phase::Think:
      for (int32_t id : s.c->stop_ids)
        if (static_cast<size_t>(id) < lim) logits[static_cast<size_t>(id)] = ninf;
      if (static_cast<size_t>(s.c->open_id) < lim) logits[static_cast<size_t>(s.c->open_id)] = ninf;
      return;
    case Phase::Forced: {
      const size_t keep = static_cast<size_t>(s.c->switch_ids[s.forced_pos]);
      for (size_t i = 0; i < lim; ++i)
        if (i != keep) logits[i] = ninf;
      return;
    }
    case Phase::Grammar:
      if (s.m.IsTerminated()) {
        std::fill(logits.begin(), logits.begin() + static_cast<std::ptrdiff_t>(lim), ninf);
        return;
      }
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
  s.history.push_back(Step{s.phase, s.forced_pos});
  switch (s.phase) {
    case Phase::Think:
      if (id == s.c->close_id) {
        s.phase = Phase::Forced;
        s.forced_pos = 0;
      }
      break;
    case Phase::Forced:
      if (++s.forced_pos == s.c->switch_ids.size()) s.phase = Phase::Grammar;
      break;
    case Phase::Grammar:
      if (!s.m.AcceptToken(id)) {
        s.history.pop_back();
        throw Error("constraint: the grammar matcher refused id " + std::to_string(id) + " (internal)");
      }
      s.bitmask_fresh = false;
      break;
  }
}

void ConstraintMatcher::rollback(int64_t n) {
  Impl& s = *impl_;
  if (n < 0 || n > static_cast<int64_t>(s.history.size()))
    throw Error("constraint: cannot roll back " + std::to_string(n) + " ids (" + std::to_string(s.history.size()) +
                " accepted)");
  int grammar_ids = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Step st = s.history.back();
    s.history.pop_back();
    if (st.phase == Phase::Grammar) ++grammar_ids;
    s.phase = st.phase;
    s.forced_pos = st.forced_pos;
  }
  if (grammar_ids > 0) {
    s.m.Rollback(grammar_ids);
    s.bitmask_fresh = false;
  }
}

bool ConstraintMatcher::terminated() const { return impl_->phase == Phase::Grammar && impl_->m.IsTerminated(); }

int64_t ConstraintMatcher::accepted() const { return static_cast<int64_t>(impl_->history.size()); }

}  // namespace k3
