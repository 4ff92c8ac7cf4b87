// Speculative-decoding flags of `k3 run`, `k3 chat` and `k3 serve` (llama.cpp's names): --draft-model DIR
// --draft-max N, --draft-min N, --spec-type none|ngram-simple|draft,
// --spec-ngram-size-n N; and the stats line. The decode loop: src/runtime/speculative.h (run, chat)
// and the scheduler's Speculation (serve, src/runtime/scheduler.h).
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "core/error.h"
#include "flag_checks.h"
#include "runtime/draft_model.h"
#include "runtime/loaded_model.h"
#include "runtime/ngram_drafter.h"
#include "runtime/scheduler.h"
#include "runtime/speculative.h"

namespace k3cli {

struct SpecFlags {
  std::string draft_model;  ///< --draft-model DIR
  std::string spec_type;    ///< --spec-type; empty = draft with --draft-model, else none
  int64_t draft_max = 4;    ///< --draft-max (4: the best measured, docs/performance.md)
  int64_t draft_min = 0;    ///< --draft-min
  int64_t ngram_n = 3;      ///< --spec-ngram-size-n

  void add_to(CLI::App* sub) {
    sub->add_option("--draft-model", draft_model,
                    "speculative decoding with this draft checkpoint (same tokenizer and vocab, e.g. models/k3-nano)");
    sub->add_option("--spec-type", spec_type,
                    "speculative decoding: none, ngram-simple (prompt lookup: drafts copied from the prompt and "
                    "output) or draft (--draft-model); default: draft when --draft-model is given, else none")
        ->check(CLI::IsMember({"none", "ngram-simple", "draft"}));
    sub->add_option("--draft-max,--draft", draft_max, "most draft tokens verified per target forward")
        ->capture_default_str()
        ->check(IntRange(1, 64));
    sub->add_option("--draft-min", draft_min, "fewer draft tokens than this: a plain decode step instead")
        ->capture_default_str()
        ->check(IntRange(0, 64));
    sub->add_option("--spec-ngram-size-n", ngram_n, "ngram-simple: longest n-gram matched (tries n down to 1)")
        ->capture_default_str()
        ->check(IntRange(1, 64));
  }

  /// The speculator these flags ask for, or null (none). Opens --draft-model into `draft` (same
  /// model options as the target; it must outlive the speculator) and checks it is compatible.
  /// Errors: k3::Error naming the flag.
  std::unique_ptr<k3::Speculator> make(const k3::LoadedModel& target, const k3::SamplerParams& sp,
                                       const k3::ModelOptions& mo, k3::LoadedModel& draft) const {
    const std::string type = resolved_type();
    if (type == "none") return nullptr;
    const k3::SpecOptions so = options();
    if (type == "ngram-simple")
      return std::make_unique<k3::Speculator>(std::make_unique<k3::NgramDrafter>(ngram_n), so);
    open_draft(target, mo, draft);
    return std::make_unique<k3::Speculator>(
        std::make_unique<k3::DraftModelDrafter>(*draft.model, sp, target.tokenizer->vocab_size()), so);
  }

  /// `k3 serve`: the scheduler's speculation these flags ask for, or nullopt (none): one
  /// drafter per admitted request (prompt lookup, or --draft-model with the request's sampler
  /// settings and its own sequence state). Opens --draft-model into `draft` (it must outlive
  /// the scheduler). Errors: k3::Error naming the flag.
  std::optional<k3::Scheduler::Options::Speculation> make_serve(const k3::LoadedModel& target,
                                                                const k3::ModelOptions& mo, int64_t n_ctx,
                                                                k3::LoadedModel& draft) const {
    const std::string type = resolved_type();
    if (type == "none") return std::nullopt;
    k3::Scheduler::Options::Speculation s;
    s.spec = options();
    if (type == "ngram-simple") {
      const int64_t n = ngram_n;
      k3::NgramDrafter check(n);  // validates --spec-ngram-size-n now, not per request
      s.make_drafter = [n](const k3::SeqRequest&) { return std::make_unique<k3::NgramDrafter>(n); };
      return s;
    }
    open_draft(target, mo, draft);
    const k3::Model* dm = draft.model.get();
    const int64_t nv = target.tokenizer->vocab_size();
    s.make_drafter = [dm, nv](const k3::SeqRequest& r) {
      return std::make_unique<k3::DraftModelDrafter>(*dm, r.sampling, nv);
    };
    s.drafter_bytes = k3::DraftModelDrafter::max_bytes(dm->config(), n_ctx, draft_max);
    return s;
  }

  /// "prompt lookup (--spec-ngram-size-n 3), --draft-max 4, --draft-min 0" for start-up lines.
  std::string describe() const {
    const std::string type = resolved_type();
    std::string d = type == "ngram-simple" ? "prompt lookup (--spec-ngram-size-n " + std::to_string(ngram_n) + ")"
                    : type == "draft"      ? "draft model " + draft_model
                                           : "off";
    if (type != "none")
      d += ", --draft-max " + std::to_string(draft_max) + ", --draft-min " + std::to_string(draft_min);
    return d;
  }

  /// "speculative (prompt lookup, --draft-max 8): accepted ..." for the stats on stderr.
  static std::string stats_line(const k3::Speculator& s) {
    return "speculative (" + s.drafter().name() + ", --draft-max " + std::to_string(s.options().draft_max) +
           "): " + s.stats().describe();
  }

 private:
  /// --spec-type, defaulted; errors for a --draft-model that the type does not use.
  std::string resolved_type() const {
    const std::string type = !spec_type.empty() ? spec_type : draft_model.empty() ? "none" : "draft";
    if (type != "draft" && !draft_model.empty())
      throw k3::Error("--draft-model: given with --spec-type " + type + " (use --spec-type draft)");
    return type;
  }
  k3::SpecOptions options() const {
    k3::SpecOptions so{draft_max, draft_min};
    so.validate();
    return so;
  }
  /// Opens --draft-model into `draft` and checks it against the target (vocab, tokenizer).
  void open_draft(const k3::LoadedModel& target, const k3::ModelOptions& mo, k3::LoadedModel& draft) const {
    if (draft_model.empty()) throw k3::Error("--spec-type draft: needs --draft-model DIR");
    try {
      draft = k3::LoadedModel::open(draft_model, mo);
    } catch (const k3::Error& e) {  // the checkpoint's errors name its files, not the flag
      std::string msg = e.what();
      if (msg.rfind("-m/--model: ", 0) == 0) msg.erase(0, 12);
      throw k3::Error("-md/--draft-model: " + msg);
    }
    k3::check_draft_compatible(target.model->config(), draft.model->config(), read_all(target, "target"),
                               read_all(draft, "--draft-model"));
    if (draft.tokenizer->vocab_size() != target.tokenizer->vocab_size())
      throw k3::Error("--draft-model: its tokenizer has " + std::to_string(draft.tokenizer->vocab_size()) +
                      " ids, the model's " + std::to_string(target.tokenizer->vocab_size()));
  }
  static std::string read_all(const k3::LoadedModel& lm, const std::string& what) {
    std::ifstream f(lm.checkpoint->dir() / "tiktoken.model", std::ios::binary);
    if (!f) throw k3::Error(what + ": cannot read " + (lm.checkpoint->dir() / "tiktoken.model").string());
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
};

}  // namespace k3cli
