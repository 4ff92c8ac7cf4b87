// Speculative-decoding flags of `k3 run` and `k3 chat` (llama.cpp's names): --draft-model DIR
// --draft-max N, --draft-min N, --spec-type none|ngram-simple|draft,
// --spec-ngram-size-n N; and the stats line. The decode loop: src/runtime/speculative.h.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "core/error.h"
#include "flag_checks.h"
#include "runtime/draft_model.h"
#include "runtime/loaded_model.h"
#include "runtime/ngram_drafter.h"
#include "runtime/speculative.h"

namespace k3cli {

struct SpecFlags {
  std::string draft_model;         ///< --draft-model DIR
  std::string spec_type;           ///< --spec-type; empty = draft with --draft-model, else none
  int64_t draft_max = 4;           ///< --draft-max (4: the best measured, docs/performance.md)
  int64_t draft_min = 0;           ///< --draft-min
  int64_t ngram_n = 3;             ///< --spec-ngram-size-n

  void add_to(CLI::App* sub) {
    sub->add_option("--draft-model", draft_model,
                    "speculative decoding with this draft checkpoint (same tokenizer and vocab, e.g. models/k3-nano)");
    sub->add_option("--spec-type", spec_type,
                    "speculative decoding: none, ngram-simple (prompt lookup: drafts copied from the prompt and "
                    "output) or draft (--draft-model); default: draft when --draft-model is given, else none")
        ->check(CLI::IsMember({"none", "ngram-simple", "draft"}));
    sub->add_option("--draft-max,--draft", draft_max, "most draft tokens verified per target forward")
        ->capture_default_str()->check(IntRange(1, 64));
    sub->add_option("--draft-min", draft_min, "fewer draft tokens than this: a plain decode step instead")
        ->capture_default_str()->check(IntRange(0, 64));
    sub->add_option("--spec-ngram-size-n", ngram_n, "ngram-simple: longest n-gram matched (tries n down to 1)")
        ->capture_default_str()->check(IntRange(1, 64));
  }

  /// The speculator these flags ask for, or null (none). Opens --draft-model into `draft` (same
  /// model options as the target; it must outlive the speculator) and checks it is compatible.
  /// Errors: k3::Error naming the flag.
  std::unique_ptr<k3::Speculator> make(const k3::LoadedModel& target, const k3::SamplerParams& sp,
                                       const k3::ModelOptions& mo, k3::LoadedModel& draft) const {
    const std::string type = !spec_type.empty() ? spec_type : draft_model.empty() ? "none" : "draft";
    if (type != "draft" && !draft_model.empty())
      throw k3::Error("--draft-model: given with --spec-type " + type + " (use --spec-type draft)");
    if (type == "none") return nullptr;
    k3::SpecOptions so{draft_max, draft_min};
    so.validate();
    if (type == "ngram-simple") return std::make_unique<k3::Speculator>(std::make_unique<k3::NgramDrafter>(ngram_n), so);
    if (draft_model.empty()) throw k3::Error("--spec-type draft: needs --draft-model DIR");
    draft = k3::LoadedModel::open(draft_model, mo);
    k3::check_draft_compatible(target.model->config(), draft.model->config(), read_all(target, "target"),
                               read_all(draft, "--draft-model"));
    if (draft.tokenizer->vocab_size() != target.tokenizer->vocab_size())
      throw k3::Error("--draft-model: its tokenizer has " + std::to_string(draft.tokenizer->vocab_size()) +
                      " ids, the model's " + std::to_string(target.tokenizer->vocab_size()));
    return std::make_unique<k3::Speculator>(
        std::make_unique<k3::DraftModelDrafter>(*draft.model, sp, target.tokenizer->vocab_size()), so);
  }

  /// "speculative (prompt lookup, --draft-max 8): accepted ..." for the stats on stderr.
  static std::string stats_line(const k3::Speculator& s) {
    return "speculative (" + s.drafter().name() + ", --draft-max " + std::to_string(s.options().draft_max) +
           "): " + s.stats().describe();
  }

 private:
  static std::string read_all(const k3::LoadedModel& lm, const std::string& what) {
    std::ifstream f(lm.checkpoint->dir() / "tiktoken.model", std::ios::binary);
    if (!f) throw k3::Error(what + ": cannot read " + (lm.checkpoint->dir() / "tiktoken.model").string());
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
};

}  // namespace k3cli
