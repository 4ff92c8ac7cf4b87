// The Block AttnRes mix as a named op (spec k3-architecture.md §3.1, algorithms.md §2): the
// per-token work of model/attn_res.cpp's fast path, on the kernel table of the calling thread's
// execution context (exec_config.h), tokens split across its workers. The fp64 oracle is
// model/attn_res.h attn_res_mix (tests/model/test_components.cpp compares them).
#pragma once
#include <cstdint>
#include <vector>

namespace k3 {

/// Mix(v_0..v_{n−1}; s) for T tokens in fp32:
///   score_j = Σ_d s[d]·v_j[d] / sqrt(mean_d(v_j²) + eps); p = softmax_j(score); out = Σ_j p_j v_j.
/// sources: n >= 1 pointers to [T, D] fp32 blocks; score: [D]; out: [T, D] (must not alias a
/// source); weights (optional): [T, n] receives p. Errors: k3::Error when there are no sources.
void attn_res_mix_fast(const std::vector<const float*>& sources, int64_t T, int64_t D, const float* score, float eps,
                       float* out, float* weights);

}  // namespace k3
