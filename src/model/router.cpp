#include "model/router.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"

namespace k3 {

void router_select_topk(std::span<const float> scores, std::span<const float> bias, int k, bool renormalize,
                        float scaling, std::span<int32_t> ids, std::span<float> weights) {
  const size_t E = scores.size();
  if (bias.size() != E)
    throw Error("router: " + std::to_string(E) + " scores but " + std::to_string(bias.size()) +
                " correction-bias entries");
  if (k < 1 || static_cast<size_t>(k) > E || ids.size() != static_cast<size_t>(k) ||
      weights.size() != static_cast<size_t>(k))
    throw Error("router: top-k with k = " + std::to_string(k) + " over " + std::to_string(E) + " experts (outputs " +
                std::to_string(ids.size()) + "/" + std::to_string(weights.size()) + ")");
  std::vector<int32_t> cand;
  std::vector<float> biased(E);
  cand.reserve(E);
  for (size_t e = 0; e < E; ++e) {
    biased[e] = scores[e] + bias[e];
    if (!std::isnan(biased[e]) && !std::isnan(scores[e])) cand.push_back(static_cast<int32_t>(e));
  }
  if (cand.size() < static_cast<size_t>(k))
    throw Error("router: only " + std::to_string(cand.size()) + " of " + std::to_string(E) +
                " expert scores are not NaN, need top-" + std::to_string(k));
  // Larger biased score first; on equal scores the lower expert id wins.
  auto better = [&](int32_t a, int32_t b) {
    if (biased[a] != biased[b]) return biased[a] > biased[b];
    return a < b;
  };
  std::partial_sort(cand.begin(), cand.begin() + k, cand.end(), better);
  std::sort(cand.begin(), cand.begin() + k);
  double sum = 0.0;
  for (int i = 0; i < k; ++i) {
    ids[i] = cand[i];
    weights[i] = scores[cand[i]];
    sum += weights[i];
  }
  for (int i = 0; i < k; ++i) {
    double wv = weights[i];
    if (renormalize) wv /= (sum + 1e-20);
    weights[i] = static_cast<float>(wv * scaling);
  }
}

}  // namespace k3
