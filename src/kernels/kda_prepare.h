// KDA pre-processing and output gating as named ops (spec k3-architecture.md §3.2 steps 2–4 and
// 6): the per-token work around the recurrence of model/kda.cpp's fast path, on the kernel table
// of the calling thread's execution context (exec_config.h), tokens split across its workers;
// fp32. The recurrence itself is kda_chunk.h / kda_decode.h. Oracle: the token-by-token k3::ref
// path of model/kda.cpp (tests/model/test_fast_path.cpp, test_kda_oracle.cpp).
//
// Shapes (outermost first, fp32): C = H·d channels; rows are the [T, ·] rows of a batch block.
#pragma once
#include <cstdint>
#include <optional>
#include <span>

namespace k3 {

/// The log-decay gate g of one channel (spec §3.2 step 4):
///   lower_bound set (K3):      g = lower_bound · σ(exp(a_log) · (z + dt_bias))
///   lower_bound absent (Kimi): g = −exp(a_log) · softplus(z + dt_bias)
float kda_log_decay(float z, float dt_bias, float a_log, std::optional<float> lower_bound);

/// KDA sizes of the pre-processing.
struct KdaPrepShape {
  int64_t H = 0, d = 0, K = 0;       ///< heads, head dim, short-conv taps (K >= 1)
  std::optional<float> lower_bound;  ///< gate_lower_bound (K3) or absent (Kimi-Linear)
  float l2_eps = 1e-6f;              ///< eps inside the q/k L2 norms
};

/// One sequence's piece of the block: its rows [row0, row0 + T) and its conv input ext
/// [3, K−1+T, C] (for q, k, v: the K−1 window rows, oldest first, then the T projections).
struct KdaPiece {
  int64_t row0 = 0, T = 0;
  const float* ext = nullptr;
};

/// Per row t of the pieces (which tile [0, T_total) in order): q, k, v = SiLU(causal depthwise
/// conv of ext with taps [3, K, C]) (vec.h short_conv_silu); per head q ← l2norm(q)/sqrt(d),
/// k ← l2norm(k); g[t, c] = kda_log_decay(z[t, c], dt_bias[c], a_log[c / d], lower_bound)
/// (computed vectorized: bit-identical per ISA to the scalar formula's dispatch); beta[t, h] =
/// σ(b[t, h]). z, q, k, v, g [T_total, C]; b, beta [T_total, H]; dt_bias [C]; a_log [H].
/// No checks (the sublayer validated its states and rows).
void kda_prepare(const KdaPrepShape& s, std::span<const KdaPiece> pieces, const float* taps, const float* z,
                 const float* dt_bias, const float* a_log, const float* b, float* q, float* k, float* v, float* g,
                 float* beta);

/// Output gating (spec §3.2 step 6) in place over o [T, C]: per head RMSNorm with the shared
/// weight o_norm [d] and eps, then o ⊙= σ(gate) with gate [T, C].
void kda_output_gate(const KdaPrepShape& s, int64_t T, const float* o_norm, float eps, const float* gate, float* o);

}  // namespace k3
