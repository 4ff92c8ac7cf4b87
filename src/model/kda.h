// KDA (Kimi Delta Attention) layer, spec k3-architecture.md §3.2 and algorithms.md §1.1–§1.2.
// Per token: q/k/v projections → short causal depthwise conv (width K from config) + SiLU →
// per-head L2 norm (eps inside the sqrt), q scaled by d^−1/2 → decay gate (K3 lower-bounded form
// or Kimi-Linear form, chosen by config) → β = σ(W_b x) → delta-rule recurrence on an fp32
// state → per-head RMSNorm × σ(full-rank gate) → o_proj.
// Dimensions: H heads, d = head_dim (key dim = value dim), C = H·d, D = hidden size.
#pragma once
#include <span>

#include "model/seq_rows.h"
#include <cstdint>
#include <optional>
#include <vector>

#include "io/config.h"
#include "model/exec.h"
#include "model/weights.h"

namespace k3 {

/// Every KDA dimension, taken from the config.
struct KdaDims {
  int64_t D = 0;                     ///< hidden size
  int64_t H = 0;                     ///< heads (linear_attn_config.num_heads)
  int64_t d = 0;                     ///< head dim (key and value)
  int64_t K = 0;                     ///< short conv width
  std::optional<float> lower_bound;  ///< K3 gate when set (−5); Kimi-Linear gate when absent
  float rms_eps = 1e-5f;             ///< o_norm eps (rms_norm_eps)
  int64_t C() const { return H * d; }
  static KdaDims from(const ModelConfig& c);
};

/// L2-norm eps of q and k (spec §3.2 step 3; fla's use_qk_l2norm_in_kernel constant).
inline constexpr float kKdaL2NormEps = 1e-6f;

/// Recurrent state of one KDA layer for one sequence.
struct KdaState {
  /// Delta-rule state S, [H, d_k, d_v] fp32, key-major (row = key channel), spec §1.2.
  std::vector<float> S;
  /// Short-conv window: the last K−1 raw (pre-conv, pre-SiLU) projections, [3, K−1, C] fp32:
  /// index 0/1/2 = q/k/v, slot 0 = oldest. Zero at sequence start.
  std::vector<float> conv;
  static KdaState zeros(const KdaDims& dims);
  uint64_t bytes() const { return (S.size() + conv.size()) * sizeof(float); }
};

/// Decay-gate log value g for one channel (spec §3.2 step 4; algorithms §1.1 step 3):
///   lower_bound set: g = lower_bound · σ(exp(a_log) · (z + dt_bias))   ∈ (lower_bound, 0)
///   lower_bound absent (Kimi-Linear): g = −exp(a_log) · softplus(z + dt_bias)
/// The retention factor is α = exp(g). Example: a_log = dt_bias = z = 0, lower_bound −5 → g = −2.5.
float kda_decay_gate(float z, float dt_bias, float a_log, std::optional<float> lower_bound);

/// Forward of one KDA layer over T consecutive tokens of one sequence.
/// x: [T, D] fp32, the layer input already normalized by input_layernorm.
/// out: [T, D] fp32 (must not alias x). `state` is read and advanced by T tokens. With
/// w.o_proj null, out receives the gated head outputs before o_proj instead, [T, C] (a rank's
/// heads under the head split, model/k3_model.cpp; dims then describe those heads only).
/// Throws k3::Error when `state` does not match `dims`.
/// ex.fast: projections through k3::matmul for all T tokens, conv/norm/gate per token, then the
/// chunkwise kernel kda_chunk (T > 1, C = 64) or kda_decode_step (T == 1) on the same state;
/// otherwise the per-token k3::ref recurrence below (the oracle).
void kda_forward(const KdaWeights& w, const KdaDims& dims, const float* x, int64_t T, KdaState& state, float* out,
                 const ExecOptions& ex = {});

/// kda_forward over a batch of sequences (kda_forward is the batch of one): x and out are
/// [T_total, D] blocks whose rows segs[s] belong to sequence s, whose state is states[s]
/// (advanced by segs[s].T tokens). Projections and o_proj run once over all rows; the conv and
/// the recurrence per sequence. Every row is computed as in a lone call: outputs and states are
/// bit-identical to kda_forward on each sequence alone (tests/model/test_batch.cpp).
/// Errors: k3::Error when segs and states differ in count, segs do not tile [0, T_total) in
/// order, or a state does not match `dims` (nothing is advanced then).
void kda_forward_batch(const KdaWeights& w, const KdaDims& dims, const float* x, std::span<const SeqRows> segs,
                       std::span<KdaState* const> states, float* out, const ExecOptions& ex = {});

}  // namespace k3
