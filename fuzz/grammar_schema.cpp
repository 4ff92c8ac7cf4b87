// libFuzzer: a constraint spec -> ConstraintCompiler::compile (runtime/grammar_constraint.h, the
// JSON-schema audit and XGrammar's schema / GBNF compilers) -> a ConstraintMatcher driven for a
// few steps with rollback. The first byte picks the kind (JSON schema, GBNF, json_object) and
// whether the think channel comes first; the rest is the text. Any input must compile or throw
// k3::Error; a compiled one must mask, accept the ids it allows and roll back consistently.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/grammar_constraint.h"
#include "tokenizer_fixture.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const k3::Tokenizer& tok = k3fuzz::tiny();
  static const k3::ConstraintCompiler comp(tok, {tok.end_of_msg_id(), tok.eos_id()}, 1);
  k3::ConstraintSpec spec;
  const uint8_t sel = data[0];
  spec.kind = (sel & 3) == 0 ? k3::ConstraintSpec::Kind::Gbnf
              : (sel & 3) == 3 ? k3::ConstraintSpec::Kind::JsonObject
                               : k3::ConstraintSpec::Kind::JsonSchema;
  spec.strict = (sel & 4) != 0;
  spec.after_think = (sel & 8) != 0;
  spec.text.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  std::shared_ptr<const k3::CompiledConstraint> c;
  try {
    c = comp.compile(spec);
  } catch (const k3::Error&) {
    return 0;
  }
  k3::ConstraintMatcher m(c);
  std::vector<float> row(static_cast<size_t>(tok.vocab_size()) + 3);
  int64_t n = 0;
  for (int step = 0; step < 24 && !m.terminated(); ++step) {
    std::fill(row.begin(), row.end(), 0.f);
    m.mask(row);
    // Pick an allowed id that depends on the step (the last allowed below a moving bound).
    int32_t pick = -1;
    const size_t bound = (static_cast<size_t>(step) * 2654435761u) % tok.vocab_size();
    for (size_t i = 0; i < static_cast<size_t>(tok.vocab_size()); ++i)
      if (std::isfinite(row[i]) && (pick < 0 || i <= bound)) pick = static_cast<int32_t>(i);
    for (size_t i = tok.vocab_size(); i < row.size(); ++i)
      if (std::isfinite(row[i])) __builtin_trap();  // beyond the vocabulary: always masked
    if (pick < 0) break;
    if (!m.allows(pick)) __builtin_trap();  // mask and allows agree
    m.accept(pick);
    ++n;
  }
  if (m.accepted() != n) __builtin_trap();
  m.rollback(n / 2);
  if (m.accepted() != n - n / 2) __builtin_trap();
  return 0;
}
