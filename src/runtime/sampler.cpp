// Sampler: llama.cpp's default chain (see sampler.h for the order and semantics).
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"

namespace k3 {

namespace {

std::string num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

// Orders candidates by descending logit, ties by ascending id.
bool before(double la, int32_t ia, double lb, int32_t ib) { return la > lb || (la == lb && ia < ib); }

}  // namespace

void SamplerParams::validate() const {
  if (!std::isfinite(temp)) throw Error("--temp: expected a finite number (<= 0 means greedy), found " + num(temp));
  if (!(top_p > 0.0f && top_p <= 1.0f))
    throw Error("--top-p: expected a value in (0, 1] (1 disables), found " + num(top_p));
  if (!(min_p >= 0.0f && min_p <= 1.0f))
    throw Error("--min-p: expected a value in [0, 1] (0 disables), found " + num(min_p));
  if (!(repeat_penalty > 0.0f) || !std::isfinite(repeat_penalty))
    throw Error("--repeat-penalty: expected a finite value > 0 (1 disables), found " + num(repeat_penalty));
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    throw Error("--frequency-penalty: expected a value in [-2, 2] (0 disables), found " + num(frequency_penalty));
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    throw Error("--presence-penalty: expected a value in [-2, 2] (0 disables), found " + num(presence_penalty));
  if (repeat_last_n < -1)
    throw Error("--repeat-last-n: expected -1 (all), 0 (off) or a positive count, found " +
                std::to_string(repeat_last_n));
}

std::string SamplerParams::describe() const {
  char b[256];
  if (temp <= 0.0f) std::snprintf(b, sizeof b, "greedy | repeat-penalty %.2f (last %d)", repeat_penalty, repeat_last_n);
  else
    std::snprintf(b, sizeof b,
                  "temp %.2f | top-k %d | top-p %.2f | min-p %.2f | repeat-penalty %.2f (last %d) | seed %llu", temp,
                  top_k, top_p, min_p, repeat_penalty, repeat_last_n, static_cast<unsigned long long>(seed));
  return b;
}

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) { p_.validate(); }

void Sampler::accept(int32_t id) {
  if (p_.repeat_last_n == 0) return;
  history_.push_back(id);
  if (p_.repeat_last_n > 0)
    while (history_.size() > static_cast<std::size_t>(p_.repeat_last_n)) history_.pop_front();
}

double Sampler::uniform01() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

void Sampler::apply_penalty(std::vector<Cand>& c) const {
  // OpenAI's logit_bias: added to the raw logit; -100 (or less) bans the id.
  for (const auto& [id, b] : p_.logit_bias) {
    if (id < 0 || static_cast<std::size_t>(id) >= c.size()) continue;
    double& l = c[static_cast<std::size_t>(id)].logit;
    l = b <= -100.0f ? -std::numeric_limits<double>::infinity() : l + b;
  }
  const bool additive = p_.frequency_penalty != 0.0f || p_.presence_penalty != 0.0f;
  if ((p_.repeat_penalty == 1.0f && !additive) || history_.empty()) return;
  // c is indexed by id here (called before any reordering). llama.cpp's penalties sampler:
  // per distinct id of the window, the repeat penalty, then
  // logit -= count·frequency_penalty + presence_penalty.
  std::unordered_map<int32_t, int64_t> count;
  for (int32_t id : history_)
    if (id >= 0 && static_cast<std::size_t>(id) < c.size()) ++count[id];
  const double pen = p_.repeat_penalty;
  for (int32_t id : history_) {
    auto it = count.find(id);
    if (it == count.end()) continue;  // out of range, or already penalized
    double& l = c[static_cast<std::size_t>(id)].logit;
    if (pen != 1.0) l = l <= 0.0 ? l * pen : l / pen;
    l -= static_cast<double>(it->second) * p_.frequency_penalty + p_.presence_penalty;
    count.erase(it);
  }
}

int32_t argmax(std::span<const float> logits) {
  if (logits.empty()) throw Error("argmax: empty logits row");
  int32_t best = -1;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i])) continue;
    if (best < 0 || logits[i] > logits[static_cast<std::size_t>(best)]) best = static_cast<int32_t>(i);
  }
  if (best < 0) throw Error("argmax: every logit is NaN");
  return best;
}

Sampler::Weights Sampler::weights(std::span<const float> logits) const {
  if (logits.empty()) throw Error("sampler: empty logits row");
  const std::size_t n = logits.size();
  std::vector<Cand> c(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isnan(logits[i])) throw Error("sampler: logit of id " + std::to_string(i) + " is NaN");
    c[i] = {static_cast<int32_t>(i), logits[i]};
  }
  apply_penalty(c);

  // Greedy: largest logit, lowest id on ties (c is still in id order).
  if (p_.temp <= 0.0f) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < n; ++i)
      if (c[i].logit > c[best].logit) best = i;
    if (!std::isfinite(c[best].logit)) throw Error("sampler: no finite logit in the row");
    return {{c[best].id}, {1.0}, 1.0};
  }

  auto cmp = [](const Cand& a, const Cand& b) { return before(a.logit, a.id, b.logit, b.id); };
  // top-k (sorting the kept prefix; the full sort when k is off is needed by top-p anyway)
  std::size_t k = (p_.top_k > 0 && static_cast<std::size_t>(p_.top_k) < n) ? static_cast<std::size_t>(p_.top_k) : n;
  std::partial_sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(k), c.end(), cmp);
  c.resize(k);
  // Drop -inf candidates (masked ids); keep at least the best one.
  while (c.size() > 1 && !std::isfinite(c.back().logit)) c.pop_back();
  if (!std::isfinite(c.front().logit)) throw Error("sampler: no finite logit in the row");

  // top-p over softmax of the current candidates.
  if (p_.top_p < 1.0f) {
    const double mx = c.front().logit;
    double z = 0.0;
    for (const Cand& x : c) z += std::exp(x.logit - mx);
    double cum = 0.0;
    std::size_t keep = c.size();
    for (std::size_t i = 0; i < c.size(); ++i) {
      cum += std::exp(c[i].logit - mx) / z;
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    c.resize(keep);
  }

  // min-p: p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p)
  if (p_.min_p > 0.0f) {
    const double thr = c.front().logit + std::log(static_cast<double>(p_.min_p));
    std::size_t keep = 1;
    while (keep < c.size() && c[keep].logit >= thr) ++keep;
    c.resize(keep);
  }

  // temperature
  const double inv_t = 1.0 / static_cast<double>(p_.temp);
  const double mx = c.front().logit * inv_t;
  Weights r{std::vector<int32_t>(c.size()), std::vector<double>(c.size()), 0.0};
  for (std::size_t i = 0; i < c.size(); ++i) {
    r.ids[i] = c[i].id;
    r.z += (r.w[i] = std::exp(c[i].logit * inv_t - mx));
  }
  return r;
}

int32_t Sampler::sample(std::span<const float> logits) {
  const Weights r = weights(logits);
  if (p_.temp <= 0.0f) return r.ids[0];
  // draw
  const double u = uniform01() * r.z;
  double cum = 0.0;
  for (std::size_t i = 0; i < r.ids.size(); ++i) {
    cum += r.w[i];
    if (u < cum) return r.ids[i];
  }
  return r.ids.back();  // u rounded up to z
}

}  // namespace k3
