// Block AttnRes (spec k3-architecture.md §3.1, algorithms.md §2): the residual stream of K3.
// Per token, a bank of committed block snapshots and a running partial sum (`prefix`) of the
// sublayer outputs of the current block replace the usual residual. Each sublayer's input is a
// softmax mix over bank ++ [prefix]; all in fp32. The stream holds a [T, D] block per source so
// that T tokens pass layer by layer (layer-major); there is no cross-token state.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/attn_res_mix.h"
#include "model/weights.h"

namespace k3 {

/// Mix(v_0..v_{n−1}; s) for T tokens (spec §3.1):
///   score_j = Σ_d s[d]·v_j[d] / sqrt(mean_d(v_j²) + eps); p = softmax_j(score); out = Σ_j p_j v_j.
/// sources: n pointers to [T, D] fp32 blocks; score: [D]; out: [T, D] (must not alias a source);
/// weights (optional): [T, n] receives p.
void attn_res_mix(const std::vector<const float*>& sources, int64_t T, int64_t D, const float* score, float eps,
                  float* out, float* weights);

// The fast twin, attn_res_mix_fast (same contract, fp32, the execution context's kernels), is
// the named op of kernels/attn_res_mix.h.

/// The per-token depth stream of the forward pass: bank of snapshots + running partial sum.
class AttnResStream {
 public:
  /// Starts with bank = [] and prefix = x0 (the token embeddings), x0: [T, D].
  AttnResStream(const float* x0, int64_t T, int64_t D, float eps);

  bool bank_empty() const { return bank_.empty(); }
  /// Sources of the next mix: bank entries then the prefix (when present).
  int64_t n_sources() const { return static_cast<int64_t>(bank_.size()) + (has_prefix_ ? 1 : 0); }
  /// h = Mix(bank ++ [prefix]; w.score) into out [T, D]; weights (optional) [T, n_sources()].
  /// fast: attn_res_mix_fast instead of the fp64 oracle attn_res_mix.
  void mix(const AttnResWeights& w, float* out, float* weights, bool fast = false) const;
  /// Snapshot the RAW layer input: bank.push(prefix); prefix = NONE (spec §3.1, i % block == 0).
  void snapshot();
  /// prefix = (prefix is NONE) ? a : prefix + a, a: [T, D].
  void add(const float* a);
  const std::vector<float>& prefix() const { return prefix_; }

 private:
  int64_t T_, D_;
  float eps_;
  std::vector<std::vector<float>> bank_;  ///< each [T, D]
  std::vector<float> prefix_;             ///< [T, D]
  bool has_prefix_ = true;
};

}  // namespace k3
