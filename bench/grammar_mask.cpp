// Constrained decoding cost (runtime/grammar_constraint.h, XGrammar 0.2.8): the tokenizer setup
// (ConstraintCompiler), the compile time of a few JSON schemas and a GBNF grammar, and the
// per-token mask time (ConstraintMatcher::mask + accept) while a valid answer is fed token by
// token, on a tokenizer's vocabulary.
// Usage: k3_bench_grammar_mask [TIKTOKEN_MODEL_OR_MODEL_DIR]...
//   default (run from the repository root): ../shared/data/kimi-tokenizer/tiktoken.model (the
//   real Kimi vocabulary, 163,840 ids) and models/k3-mini (8,192 ids).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/grammar_constraint.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

struct Case {
  const char* name;
  k3::ConstraintSpec::Kind kind;
  const char* text;
  const char* answer;
};

const Case kCases[] = {
    {"json_object", k3::ConstraintSpec::Kind::JsonObject, "",
     R"({"name": "Abraham", "age": 175, "sons": ["Isaac", "Ishmael"], "land": {"from": "Ur", "to": "Canaan"}})"},
    {"schema: flat person", k3::ConstraintSpec::Kind::JsonSchema,
     R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0},
        "tribe":{"enum":["Judah","Levi","Dan"]},"alive":{"type":"boolean"}},
        "required":["name","age","tribe","alive"],"additionalProperties":false})",
     R"({"name": "Aaron", "age": 123, "tribe": "Levi", "alive": false})"},
    {"schema: nested + arrays + formats", k3::ConstraintSpec::Kind::JsonSchema,
     R"({"type":"object","properties":{"id":{"type":"string","format":"uuid"},
        "when":{"type":"string","format":"date"},"items":{"type":"array","items":{"type":"object",
        "properties":{"sku":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"},"qty":{"type":"integer","minimum":1},
        "price":{"type":"number"}},"required":["sku","qty","price"],"additionalProperties":false},"maxItems":5},
        "note":{"anyOf":[{"type":"string"},{"type":"null"}]}},"required":["id","when","items","note"],
        "additionalProperties":false})",
     R"({"id": "123e4567-e89b-12d3-a456-426614174000", "when": "2026-12-05", "items": [{"sku": "ABC-1234", "qty": 2, "price": 9.5}, {"sku": "XYZ-0001", "qty": 1, "price": 120}], "note": null})"},
    {"GBNF: yes/no + reason", k3::ConstraintSpec::Kind::Gbnf, R"(root ::= ("yes" | "no") " because " [a-z ]+ ".")",
     "yes because the sky is blue."},
};

void run(const std::string& path) {
  const bool dir = std::filesystem::is_directory(path);
  auto t0 = Clock::now();
  const k3::Tokenizer tok = dir ? k3::Tokenizer::load(path) : k3::Tokenizer::from_files(path);
  std::printf("\n%s: %d ids (tokenizer load %.0f ms)\n", path.c_str(), tok.vocab_size(), ms_since(t0));
  t0 = Clock::now();
  k3::ConstraintCompiler comp(tok, {tok.end_of_msg_id(), tok.eos_id()}, 1);
  std::printf("  ConstraintCompiler (XGrammar TokenizerInfo): %.0f ms\n", ms_since(t0));
  std::printf("  %-36s %12s %10s %14s %14s %12s\n", "constraint", "compile ms", "tokens", "mask us/tok", "mask max us",
              "accept us");
  std::vector<float> row(static_cast<size_t>(tok.vocab_size()));
  for (const Case& c : kCases) {
    k3::ConstraintSpec spec;
    spec.kind = c.kind;
    spec.text = c.text;
    // Cold compile: a fresh compiler has an empty cache.
    k3::ConstraintCompiler fresh(tok, {tok.end_of_msg_id(), tok.eos_id()}, 1);
    t0 = Clock::now();
    auto cc = fresh.compile(spec);
    const double compile_ms = ms_since(t0);
    const std::vector<int32_t> ids = tok.encode(c.answer);
    double mask_total = 0, mask_max = 0, acc_total = 0;
    const int reps = 5;
    for (int r = 0; r < reps; ++r) {
      k3::ConstraintMatcher m(cc);
      for (int32_t id : ids) {
        std::fill(row.begin(), row.end(), 0.f);
        auto t = Clock::now();
        m.mask(row);
        const double us = ms_since(t) * 1000;
        mask_total += us;
        mask_max = std::max(mask_max, us);
        t = Clock::now();
        m.accept(id);
        acc_total += ms_since(t) * 1000;
      }
    }
    const double n = static_cast<double>(ids.size()) * reps;
    std::printf("  %-36s %12.1f %10zu %14.1f %14.1f %12.1f\n", c.name, compile_ms, ids.size(), mask_total / n,
                mask_max, acc_total / n);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) paths.push_back(argv[i]);
  if (paths.empty()) {
    paths = {"../shared/data/kimi-tokenizer/tiktoken.model", "models/k3-mini"};  // from the repository root
  }
  try {
    for (const auto& p : paths) run(p);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "k3_bench_grammar_mask: %s\n", e.what());
    return 1;
  }
  return 0;
}
