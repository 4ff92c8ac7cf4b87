// k3::ConstraintCompiler / ConstraintMatcher (runtime/grammar_constraint.h) on K3-mini's tokenizer
// and the real Kimi vocabulary: the mask against a string-level oracle (XGrammar's AcceptString on
// each token's bytes), rollback, the think -> response channel switch, termination on a stop id,
// drafts masked through SequenceDecoder::step, and compile errors.
#include <gtest/gtest.h>
#include <xgrammar/xgrammar.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/prefill_grid.h"
#include "runtime/grammar_constraint.h"
#include "runtime/sequence_decoder.h"
#include "tokenizer/tokenizer.h"

namespace {

const k3::Tokenizer& mini() {
  static const k3::Tokenizer t = k3::Tokenizer::load(std::string(K3_SOURCE_DIR) + "/models/k3-mini");
  return t;
}

std::vector<int32_t> stops(const k3::Tokenizer& t) { return {t.end_of_msg_id(), t.eos_id()}; }

const char* kSchema = R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},
  "n":{"type":"integer","minimum":0,"maximum":99},"tags":{"type":"array","items":{"enum":["a","b"]}}},
  "required":["name","n","tags"],"additionalProperties":false})";

k3::ConstraintSpec schema_spec(bool after_think = false) {
  k3::ConstraintSpec s;
  s.kind = k3::ConstraintSpec::Kind::JsonSchema;
  s.text = kSchema;
  s.after_think = after_think;
  return s;
}

std::vector<bool> allowed_set(k3::ConstraintMatcher& m, int32_t n) {
  std::vector<float> row(static_cast<size_t>(n), 0.f);
  m.mask(row);
  std::vector<bool> a(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) a[static_cast<size_t>(i)] = std::isfinite(row[static_cast<size_t>(i)]);
  return a;
}

// The oracle: an id is allowed iff the text accepted so far followed by the id's bytes is still a
// prefix of the grammar's language (XGrammar's string-level matcher), specials never; once the
// grammar is complete, exactly the stop ids.
std::vector<bool> oracle(const k3::Tokenizer& t, const std::string& schema, const std::string& text) {
  std::vector<bool> a(static_cast<size_t>(t.vocab_size()), false);
  xgrammar::TokenizerInfo info(std::vector<std::string>(1, "x"));
  xgrammar::GrammarCompiler comp(info, 1, false);
  xgrammar::GrammarMatcher base(comp.CompileJSONSchema(schema, false, std::nullopt, std::nullopt, true));
  EXPECT_TRUE(text.empty() || base.AcceptString(text));
  for (int32_t i = 0; i < t.n_ranks(); ++i) {
    xgrammar::GrammarMatcher f = base.Fork();
    const std::string_view b = t.token_bytes(i);
    a[static_cast<size_t>(i)] = !b.empty() && f.AcceptString(std::string(b));
  }
  if (base.IsCompleted())
    for (int32_t s : stops(t)) a[static_cast<size_t>(s)] = true;
  return a;
}

TEST(GrammarConstraint, MaskEqualsTheStringOracleAtEveryStep) {
  const k3::Tokenizer& t = mini();
  k3::ConstraintCompiler comp(t, stops(t));
  k3::ConstraintMatcher m(comp.compile(schema_spec()));
  const std::string answer = R"({"name": "Abel", "n": 42, "tags": ["a", "b"]})";
  const std::vector<int32_t> ids = t.encode(answer);
  std::string text;
  for (size_t k = 0; k <= ids.size(); ++k) {
    const std::vector<bool> got = allowed_set(m, t.vocab_size());
    const std::vector<bool> want = oracle(t, kSchema, text);
    int64_t n_allowed = 0;
    for (int32_t i = 0; i < t.vocab_size(); ++i) {
      ASSERT_EQ(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)])
          << "step " << k << " id " << i << " after " << text;
      n_allowed += got[static_cast<size_t>(i)];
    }
    EXPECT_GT(n_allowed, 0);
    if (k == ids.size()) break;
    m.accept(ids[k]);
    text += std::string(t.token_bytes(ids[k]));
  }
  // Complete: only the stop ids; accepting one terminates, then nothing is allowed.
  const std::vector<bool> end = allowed_set(m, t.vocab_size());
  for (int32_t i = 0; i < t.vocab_size(); ++i)
    EXPECT_EQ(end[static_cast<size_t>(i)], i == t.end_of_msg_id() || i == t.eos_id()) << i;
  EXPECT_THROW(m.accept(t.encode("x")[0]), k3::Error);
  m.accept(t.end_of_msg_id());
  EXPECT_TRUE(m.terminated());
  const std::vector<bool> none = allowed_set(m, t.vocab_size() + 7);
  for (bool b : none) EXPECT_FALSE(b);
}

TEST(GrammarConstraint, RollbackRestoresEachEarlierMask) {
  const k3::Tokenizer& t = mini();
  k3::ConstraintCompiler comp(t, stops(t));
  k3::ConstraintMatcher m(comp.compile(schema_spec()));
  const std::vector<int32_t> ids = t.encode(R"({"name": "Seth", "n": 7, "tags": []})");
  std::vector<std::vector<bool>> masks;
  for (int32_t id : ids) {
    masks.push_back(allowed_set(m, t.vocab_size()));
    m.accept(id);
  }
  EXPECT_EQ(m.accepted(), static_cast<int64_t>(ids.size()));
  for (size_t back = 1; back <= ids.size(); back += 3) {
    k3::ConstraintMatcher r(comp.compile(schema_spec()));
    for (int32_t id : ids) r.accept(id);
    r.rollback(static_cast<int64_t>(back));
    EXPECT_EQ(allowed_set(r, t.vocab_size()), masks[ids.size() - back]) << "rolled back " << back;
    for (size_t j = ids.size() - back; j < ids.size(); ++j) r.accept(ids[j]);  // the same path again
    EXPECT_EQ(r.accepted(), static_cast<int64_t>(ids.size()));
  }
  EXPECT_THROW(m.rollback(static_cast<int64_t>(ids.size()) + 1), k3::Error);
}

TEST(GrammarConstraint, ThinkingStaysFreeUntilTheResponseChannel) {
  const k3::Tokenizer& t = mini();
  k3::ConstraintCompiler comp(t, stops(t));
  k3::ConstraintMatcher m(comp.compile(schema_spec(/*after_think=*/true)));
  // Think: any text id, but no stop id and no <|open|>.
  for (int32_t id : t.encode("Let me think: the answer is not JSON yet."))
    m.accept(id);
  EXPECT_FALSE(m.allows(t.end_of_msg_id()));
  EXPECT_FALSE(m.allows(t.eos_id()));
  EXPECT_FALSE(m.allows(t.open_id()));
  // <|close|> then exactly think<|sep|><|open|>response<|sep|>, one id at a time.
  m.accept(t.close_id());
  const std::vector<int32_t> sw = t.encode("think<|sep|><|open|>response<|sep|>", k3::AllowedSpecials::all());
  for (int32_t id : sw) {
    const std::vector<bool> a = allowed_set(m, t.vocab_size());
    int n = 0;
    for (bool b : a) n += b;
    EXPECT_EQ(n, 1);
    EXPECT_TRUE(a[static_cast<size_t>(id)]);
    m.accept(id);
  }
  // Response: the grammar.
  EXPECT_FALSE(m.allows(t.encode("x")[0]));
  EXPECT_TRUE(m.allows(t.encode("{")[0]));
  m.rollback(static_cast<int64_t>(sw.size()) + 1);  // back into think
  EXPECT_TRUE(m.allows(t.encode("x")[0]));
}

TEST(GrammarConstraint, DraftsAreMaskedAndARefusedDraftIsRejected) {
  const k3::Tokenizer& t = mini();
  k3::ConstraintCompiler comp(t, stops(t));
  k3::ConstraintMatcher m(comp.compile(schema_spec()));
  k3::DecodeLimits lim;
  lim.n_ctx = 4096;
  lim.n_vocab = t.vocab_size();
  lim.stop_ids = stops(t);
  k3::SequenceDecoder dec(lim, k3::PrefillGrid(256));
  k3::SamplerParams p;
  p.temp = 0.f;
  k3::Sampler s(p);
  const int32_t brace = t.encode("{")[0], x = t.encode("x")[0];
  // Rows favour `x` everywhere; drafts [ "{", "x" ]: "{" is allowed, "x" is not after it.
  const size_t V = static_cast<size_t>(t.vocab_size());
  std::vector<std::vector<float>> data(3, std::vector<float>(V, 0.f));
  for (auto& r : data) r[static_cast<size_t>(x)] = 10.f;
  data[0][static_cast<size_t>(brace)] = 5.f;
  std::vector<std::span<const float>> rows(data.begin(), data.end());
  k3::Draft d;
  d.ids = {brace, x};
  std::vector<int32_t> out;
  const k3::DecodeStep st = dec.step(s, rows, d, 3, [&](int32_t id, size_t) {
    out.push_back(id);
    return true;
  }, nullptr, &m);
  ASSERT_EQ(st.ids.size(), 2u);
  EXPECT_EQ(st.ids[0], brace);  // the draft the grammar allows (the masked argmax)
  EXPECT_NE(st.ids[1], x);      // the refused draft is replaced by an allowed id
  EXPECT_EQ(st.accepted, 1);
  EXPECT_EQ(m.accepted(), 2);
  EXPECT_TRUE(st.needs_rollback());
}

TEST(GrammarConstraint, CompileErrorsNameWhatIsWrong) {
  const k3::Tokenizer& t = mini();
  k3::ConstraintLimits lim;
  lim.max_text_bytes = 250;
  k3::ConstraintCompiler comp(t, stops(t), 1, lim);
  k3::ConstraintSpec s;
  s.kind = k3::ConstraintSpec::Kind::JsonSchema;
  for (const char* bad : {"{", R"({"type":"object","properties":{"a":{"$ref":"#/nope"}}})", "[1,2]"}) {
    s.text = bad;
    try {
      comp.compile(s);
      ADD_FAILURE() << "compiled " << bad;
    } catch (const k3::Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("json schema: ", 0), 0u) << e.what();
    }
  }
  for (const char* ignored : {R"({"not":{"type":"string"}})", R"({"type":"array","uniqueItems":true})",
                              R"({"type":"string","format":"credit-card"})",
                              R"({"allOf":[{"type":"string"},{"type":"integer"}]})",
                              R"({"type":"object","properties":{"a":{"if":{},"then":{}}}})"}) {
    s.text = ignored;
    EXPECT_THROW(comp.compile(s), k3::Error) << ignored;
  }
  s.text = R"({"type":"object","properties":{"not":{"type":"string","format":"email"}}})";  // a property named "not"
  EXPECT_NO_THROW(comp.compile(s));
  s.text = std::string(300, ' ') + "{}";
  EXPECT_THROW(comp.compile(s), k3::Error);
  s.kind = k3::ConstraintSpec::Kind::Gbnf;
  s.text = "root ::= undefined_rule";
  try {
    comp.compile(s);
    ADD_FAILURE();
  } catch (const k3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("GBNF: "), std::string::npos) << e.what();
  }
  s.text = R"(root ::= "yes" | "no")";
  k3::ConstraintMatcher m(comp.compile(s));
  EXPECT_TRUE(m.allows(t.encode("yes")[0]));
  EXPECT_FALSE(m.allows(t.encode("maybe")[0]));
  EXPECT_THROW(k3::ConstraintCompiler(t, {}), k3::Error);
}

TEST(GrammarConstraint, KimiVocabularyJsonObject) {
  const k3::Tokenizer t =
      k3::Tokenizer::from_files(std::string(K3_SHARED_DIR) + "/data/kimi-tokenizer/tiktoken.model");
  k3::ConstraintCompiler comp(t, stops(t));
  k3::ConstraintSpec s;
  s.kind = k3::ConstraintSpec::Kind::JsonObject;
  k3::ConstraintMatcher m(comp.compile(s));
  for (int32_t id : t.encode(R"({"a": [1, 2.5, "x"], "b": {"c": null}})")) m.accept(id);
  EXPECT_TRUE(m.allows(t.end_of_msg_id()));
  EXPECT_FALSE(m.allows(t.encode("x")[0]));
  EXPECT_FALSE(m.allows(t.open_id()));
}

}  // namespace

namespace {

TEST(GrammarConstraint, ToolCallForcesTheK3ToolsChannelAndTheArgumentsSchema) {
  const k3::Tokenizer& t = mini();
  k3::ConstraintCompiler comp(t, stops(t));
  k3::ConstraintSpec s;
  s.kind = k3::ConstraintSpec::Kind::ToolCall;
  s.tools = {{"add", R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],
               "additionalProperties":false})"},
             {"say", ""}};
  auto cc = comp.compile(s);
  k3::ConstraintMatcher m(cc);
  const auto A = k3::AllowedSpecials::all();
  auto feed_forced = [&](const std::string& text) {
    for (int32_t id : t.encode(text, A)) {
      const std::vector<bool> a = allowed_set(m, t.vocab_size());
      int n = 0;
      for (bool b : a) n += b;
      ASSERT_EQ(n, 1) << text;
      m.accept(id);
    }
  };
  feed_forced("<|close|>response<|sep|><|open|>tools<|sep|><|open|>");
  EXPECT_FALSE(m.allows(t.encode("x")[0]));
  for (int32_t id : t.encode("call tool=\"add\" index=\"1\"")) m.accept(id);
  m.accept(t.sep_id());
  feed_forced("<|open|>json type=\"object\"<|sep|>");
  // The arguments follow add's schema: "b" is not a property of it.
  for (int32_t id : t.encode("{\"a\": 1")) m.accept(id);
  EXPECT_FALSE(m.allows(t.close_id()));
  for (int32_t id : t.encode("}")) m.accept(id);
  EXPECT_TRUE(m.allows(t.close_id()));
  m.accept(t.close_id());
  feed_forced("json<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>");
  EXPECT_TRUE(m.allows(t.end_of_msg_id()));
  EXPECT_FALSE(m.allows(t.encode("x")[0]));
  m.accept(t.end_of_msg_id());
  EXPECT_TRUE(m.terminated());
  // Back to the start of the name and down the other tool: its arguments are any object.
  const int64_t prefix = static_cast<int64_t>(t.encode("<|close|>response<|sep|><|open|>tools<|sep|><|open|>", A).size());
  m.rollback(m.accepted() - prefix);
  EXPECT_FALSE(m.terminated());
  for (int32_t id : t.encode("call tool=\"say\" index=\"1\"")) m.accept(id);
  m.accept(t.sep_id());
  for (int32_t id : t.encode("<|open|>json type=\"object\"<|sep|>{\"b\": [true]}", A)) m.accept(id);
  EXPECT_TRUE(m.allows(t.close_id()));
  EXPECT_THROW(m.accept(t.encode("x")[0]), k3::Error);
}

}  // namespace
