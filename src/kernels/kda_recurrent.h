// KDA (Kimi Delta Attention) delta rule, token-by-token recurrent form — the plain scalar oracle.
// Spec: /work/shared/spec/algorithms.md §1.2 (exact update order), k3-architecture.md §3.2 step 6.
//
// Conventions shared by every KDA kernel (kda_recurrent.h, kda_chunk.h, kda_decode.h):
//   T tokens, H heads, K key dim, V value dim (K3: H = 96, K = V = 128). Shapes outermost first.
//   q    [T, H, K] fp32  L2-normalized and already scaled by K^-1/2 (§1.1 step 5)
//   k    [T, H, K] fp32  L2-normalized
//   v    [T, H, V] fp32
//   g    [T, H, K] fp32  per-channel log-decay, finite and <= 0 (K3 gate: in (-5, 0));
//                        the retention factor is alpha = exp(g) in (0, 1]
//   beta [T, H]    fp32  write strength per token and head (K3: sigmoid, in (0, 1))
//   state [H, K, V] fp32 K-MAJOR: state[h][d][j], row d = key channel, column j = value channel.
//                        (K3's official modeling stores V-major [H, V, K]; transpose when
//                        importing/exporting such states.) In/out: the state entering token 0 on
//                        entry, the state after token T-1 on return. Zero for a fresh sequence.
//   out  [T, H, V] fp32  o_t per head.
//
// Per head and token t, in exactly this order (all fp32):
//   1. S <- Diag(exp(g_t)) S           (row d scaled by exp(g_t[d]))
//   2. e  = v_t - S^T k_t               (against the decayed state; sum over d in increasing order)
//   3. S <- S + k_t (beta_t e)^T
//   4. o_t = S^T q_t                    (with the updated state; sum over d in increasing order)
#pragma once

namespace k3 {

/// Plain single-threaded recurrence over T tokens (the oracle for kda_chunk and kda_decode_step).
/// Shapes/dtypes/layouts as in the header comment. T >= 0, H, K, V >= 1 (throws k3::Error
/// otherwise). `out` must not alias any input. Cost ~7*K*V FLOP per token and head.
void kda_recurrent(int T, int H, int K, int V, const float* q, const float* k, const float* v, const float* g,
                   const float* beta, float* state, float* out);

}  // namespace k3
