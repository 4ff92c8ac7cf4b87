// LatentMoE router top-k (spec k3-architecture.md §3.6 steps 1–3, algorithms.md §3.1).
#pragma once
#include <cstdint>
#include <span>

namespace k3 {

/// Selects k experts and their weights from sigmoid router scores.
///   selection: the k largest biased scores s[e] + bias[e] (the bias is used ONLY here);
///              entries whose biased score is NaN are never selected; ties are broken by the
///              lower expert id (deterministic); any finite or infinite value may win — there is
///              no sentinel that assumes non-negative scores.
///   weights:   w = s[e] (unbiased); if renormalize: w ← w / (Σw + 1e-20); then w ← w · scaling.
/// scores, bias: [E] fp32; ids: [k] out, sorted ascending by expert id; weights: [k] out, in the
/// same order as ids.
/// Throws k3::Error when k < 1, k > E, sizes disagree, or fewer than k biased scores are not NaN.
void router_select_topk(std::span<const float> scores, std::span<const float> bias, int k, bool renormalize,
                        float scaling, std::span<int32_t> ids, std::span<float> weights);

}  // namespace k3
