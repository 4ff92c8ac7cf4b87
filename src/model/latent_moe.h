// Stable LatentMoE (spec k3-architecture.md §3.6, algorithms.md §3.1), input x = normalized [D]:
// sigmoid router in fp32 → top-k on score + correction bias (model/router.h) → weights = unbiased
// scores renormalized × routed_scaling_factor → z = W_red x [L] → Σ_k w_k · W2_e SiTU(W1_e z, W3_e z)
// (MXFP4 experts) → RMSNorm over the latent sum → W_up [D] → + shared SiTU-GLU MLP on x.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/comm.h"

#include "io/config.h"
#include "model/dense_mlp.h"
#include "model/weights.h"

namespace k3 {

struct MoeDims {
  int64_t D = 0, E = 0, L = 0, Im = 0;  ///< hidden, experts, latent width, expert width
  int k = 0;                            ///< num_experts_per_token
  bool renormalize = true;              ///< moe_renormalize (applied only when k > 1)
  float scaling = 1.f;                  ///< routed_scaling_factor
  float rms_eps = 1e-5f;                ///< latent RMSNorm eps
  static MoeDims from(const ModelConfig& c);
};

/// Streamed experts: how many distinct experts of a block one acquire pins (the fast path reads a
/// prefill chunk's experts in groups of this many; decode selects k <= it: one group).
inline int64_t moe_stream_group(int k) { return 2 * k > 32 ? 2 * k : 32; }

/// Experts of a later MoE layer to prefetch (ExpertStore::prefetch) once this layer's own reads
/// are queued: `layer` its index, `ids` ascending expert ids (predict_moe_experts).
struct MoePrefetch {
  int layer = -1;
  std::vector<int64_t> ids;
};

/// The experts MoE layer `w` is predicted to select, from a hidden state seen before its own FFN
/// input exists (the residual-stream input of an earlier layer's FFN): for each of the T rows of
/// h [T, D] fp32, the top-k of σ(W_gate · RMSNorm(h; post_norm)) + correction bias (the layer's
/// own selection rule, model/router.h, applied to the earlier state; post_norm [D] is the
/// predicted layer's post_attention_layernorm). Returns the union over rows, restricted to
/// `block` (this rank's expert ids), ascending, its first `cap` ids. Used only to schedule reads:
/// nothing computed from it enters a result. Errors: as router_select_topk (a row with fewer than
/// k scores that are not NaN).
std::vector<int64_t> predict_moe_experts(const MoeWeights& w, const MoeDims& dims, std::span<const float> post_norm,
                                         const float* h, int64_t T, IndexRange block, int64_t cap);

/// Forward of one LatentMoE layer over T tokens. x: [T, D] fp32 (after post_attention_layernorm);
/// out: [T, D] (must not alias x); topk_ids/topk_w (optional): [T, k] receive the routing
/// (ids ascending). Throws k3::Error on an invalid MXFP4 scale or a router without k usable scores.
/// ex.fast: router and projections through k3::matmul for all T tokens; tokens grouped by expert
/// and each selected expert run once on its group with mxfp4_glu_ffn (path ex.mxfp4), so every
/// selected expert's bytes are read once per call; weighted outputs are added per token in
/// ascending expert id (the oracle's order). Otherwise the per-token k3::ref oracle.
/// With w.store set, both paths take the experts' bytes from the ExpertStore (one acquire per
/// call on the fast path: the block's distinct experts; per token on the oracle path) instead of
/// the mapping — identical results; a failed read throws the store's k3::Error (names the shard).
/// With w.comm of N > 1 ranks (a collective call: every rank calls it with identical x): this
/// rank computes only the selected experts of its block split_range(E, N, rank) (and reads, maps or streams only
/// their bytes); one all-gather of the expert outputs ([rows, L] fp32 per rank, possibly empty)
/// gives every rank all of them, and the combine runs as in one process, so `out` is
/// bit-identical to one process on every rank (spec distributed.md §4.2).
/// prefetch (optional, with w.store): passed to w.store->prefetch() right after this layer's
/// first acquire, so the predicted reads queue behind this layer's own (the oracle path: before
/// its first token).
void latent_moe_forward(const MoeWeights& w, const MoeDims& dims, const GluActivation& act, const float* x, int64_t T,
                        float* out, int32_t* topk_ids, float* topk_w, const ExecOptions& ex = {},
                        const MoePrefetch* prefetch = nullptr);

}  // namespace k3
