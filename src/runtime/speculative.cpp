#include "runtime/speculative.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "core/error.h"
#include "runtime/sequence_decoder.h"
#include "runtime/stats.h"

namespace k3 {

void SpecOptions::validate() const {
  if (draft_max < 1 || draft_max > 64) throw Error("--draft-max: expected 1..64, found " + std::to_string(draft_max));
  if (draft_min < 0 || draft_min > draft_max)
    throw Error("--draft-min: expected 0..--draft-max (" + std::to_string(draft_max) + "), found " +
                std::to_string(draft_min));
}

std::string SpecStats::describe() const {
  char b[256];
  const double rate = drafted ? 100.0 * static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
  const double per = verifies ? static_cast<double>(emitted) / static_cast<double>(verifies) : 0.0;
  std::snprintf(b, sizeof b,
                "accepted %lld/%lld drafts (%.1f%%), %.2f tokens per verify, %lld verifies | "
                "draft %.0f ms, verify %.0f ms, rollback %.1f ms",
                static_cast<long long>(accepted), static_cast<long long>(drafted), rate, per,
                static_cast<long long>(verifies), draft_ms, verify_ms, rollback_ms);
  return b;
}

namespace {

/// Probability of `id` under w (0 when it is not a candidate).
double prob_of(const Sampler::Weights& w, int32_t id) {
  for (size_t i = 0; i < w.ids.size(); ++i)
    if (w.ids[i] == id) return w.w[i] / w.z;
  return 0.0;
}

/// Draws from the normalized residual max(0, p − q) (q one-hot on `draft` when q is null);
/// falls back to p when the residual has no mass (p == q up to rounding).
int32_t draw_residual(Sampler& s, const Sampler::Weights& p, const Sampler::Weights* q, int32_t draft) {
  std::vector<double> r(p.ids.size());
  double z = 0.0;
  for (size_t i = 0; i < p.ids.size(); ++i) {
    const double qi = q ? prob_of(*q, p.ids[i]) : (p.ids[i] == draft ? 1.0 : 0.0);
    z += (r[i] = std::max(0.0, p.w[i] / p.z - qi));
  }
  if (!(z > 0.0)) {  // guard the 0/0 of algorithms.md §7.3: sample p itself
    r.assign(p.w.begin(), p.w.end());
    z = p.z;
  }
  const double u = s.uniform() * z;
  double cum = 0.0;
  for (size_t i = 0; i < r.size(); ++i) {
    cum += r[i];
    if (u < cum) return p.ids[i];
  }
  for (size_t i = r.size(); i-- > 0;)
    if (r[i] > 0.0) return p.ids[i];
  return p.ids.back();
}

}  // namespace

std::vector<int32_t> accept_drafts(Sampler& sampler, std::span<const std::span<const float>> rows, const Draft& draft,
                                   const std::function<bool(int32_t)>& is_stop) {
  const size_t k = draft.ids.size();
  if (rows.size() != k + 1)
    throw Error("speculative: " + std::to_string(rows.size()) + " verify rows for " + std::to_string(k) +
                " drafts (expected k + 1)");
  if (!draft.q.empty() && draft.q.size() != k)
    throw Error("speculative: " + std::to_string(draft.q.size()) + " draft distributions for " + std::to_string(k) +
                " drafts");
  const bool greedy = sampler.params().temp <= 0.0f;
  std::vector<int32_t> out;
  for (size_t i = 0; i < k; ++i) {
    const int32_t d = draft.ids[i];
    const Sampler::Weights p = sampler.weights(rows[i]);
    bool ok;
    if (greedy) {
      ok = p.ids[0] == d;
    } else {
      const double pd = prob_of(p, d), qd = draft.q.empty() ? 1.0 : prob_of(draft.q[i], d);
      // accept with probability min(1, p/q): u < p/q with u uniform in [0, 1)
      ok = qd > 0.0 ? sampler.uniform() * qd < pd : false;
    }
    if (!ok) {
      const int32_t c = greedy ? p.ids[0] : draw_residual(sampler, p, draft.q.empty() ? nullptr : &draft.q[i], d);
      sampler.accept(c);
      out.push_back(c);
      return out;
    }
    sampler.accept(d);
    out.push_back(d);
    if (is_stop && is_stop(d)) return out;
  }
  const int32_t bonus = sampler.sample(rows[k]);
  sampler.accept(bonus);
  out.push_back(bonus);
  return out;
}

Speculator::Speculator(std::unique_ptr<Drafter> drafter, SpecOptions opt) : drafter_(std::move(drafter)), opt_(opt) {
  if (!drafter_) throw Error("speculative: no drafter");
  opt_.validate();
}

Speculator::~Speculator() = default;

void Speculator::decode(const Model& model, SequenceState& seq, std::span<const int32_t> prompt, Sampler& sampler,
                        const GenerateOptions& opt, std::vector<float> logits,
                        const std::function<bool(int32_t)>& on_token, GenerateResult& r) {
  const int64_t vocab = model.config().vocab_size;
  const int64_t n_vocab = opt.n_vocab > 0 ? opt.n_vocab : vocab;
  // The drafter's context: every id the target holds. A state that is not the continuation of
  // the last call (a new sequence, a context shift) starts the history over.
  const int64_t n_before = seq.n_past() - static_cast<int64_t>(prompt.size());
  if (static_cast<int64_t>(history_.size()) != n_before || n_before < 0) {
    history_.clear();
    drafter_->reset();
  }
  history_.insert(history_.end(), prompt.begin(), prompt.end());
  // The decode rules (stop, stream, context, length, draft caps, rollback): one SequenceDecoder.
  SequenceDecoder dec(decode_limits(opt, n_vocab), model.prefill_grid());
  r.stop = StopReason::MaxTokens;
  if (opt.n_predict == 0) return;
  if (opt.cancel && opt.cancel->load()) {
    r.stop = StopReason::Cancelled;
    return;
  }
  const EmitFn emit = [&](int32_t id, size_t) { return on_token(id) && !(opt.cancel && opt.cancel->load()); };
  auto take = [&](const DecodeStep& st) {
    r.ids.insert(r.ids.end(), st.ids.begin(), st.ids.begin() + st.n_emitted);
    r.stop = stop_reason(dec);
    r.stop_id = dec.stop_id();
  };
  // The first id comes from the prefill's row, as in plain decoding.
  {
    const std::span<const float> row(logits.data(), static_cast<size_t>(n_vocab));
    take(dec.step(sampler, std::span<const std::span<const float>>(&row, 1), Draft{}, seq.n_past(), emit));
  }
  std::vector<int32_t> window, ctx;
  std::vector<std::span<const float>> rows;
  while (!dec.done()) {
    const int32_t t0 = r.ids.back();
    const int64_t k = dec.draft_cap(seq.n_past(), opt_.draft_max);
    Draft draft;
    if (k >= std::max<int64_t>(1, opt_.draft_min)) {
      Timer td;
      ctx.assign(history_.begin(), history_.end());
      ctx.push_back(t0);
      draft = drafter_->propose(ctx, k);
      stats_.draft_ms += td.ms();
      dec.cap_draft(draft, k, opt_.draft_min);
    }
    const int64_t nd = static_cast<int64_t>(draft.ids.size());
    window.assign(1, t0);
    window.insert(window.end(), draft.ids.begin(), draft.ids.end());
    Timer tv;
    BatchEntry e{&seq, window, BatchLogits::All};
    e.per_token = true;
    e.kda_steps = nd > 0 ? &steps_ : nullptr;
    const std::vector<float> all = std::move(model.forward_batch(std::span<const BatchEntry>(&e, 1))[0]);
    rows.clear();
    for (int64_t i = 0; i <= nd; ++i) rows.emplace_back(all.data() + i * vocab, static_cast<size_t>(n_vocab));
    const DecodeStep st = dec.step(sampler, rows, draft, seq.n_past(), emit);
    stats_.verify_ms += tv.ms();
    ++stats_.verifies;
    stats_.drafted += nd;
    stats_.accepted += st.accepted;
    stats_.emitted += st.n_emitted;
    if (st.needs_rollback()) {
      Timer tr;
      rollback_verify(seq, steps_, st);
      stats_.rollback_ms += tr.ms();
    }
    history_.insert(history_.end(), window.begin(), window.begin() + st.keep());
    take(st);
  }
}

}  // namespace k3
