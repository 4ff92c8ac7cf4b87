// KDA delta rule, chunkwise-parallel (WY / UT) form for prefill.
// Spec: algorithms.md §1.3 (equations), §1.4 (numerical safety, causal anchors), §1.5 (cost).
// Tensor conventions (shapes outermost first, fp32, K-major state [H, K, V]) are exactly those of
// kernels/kda_recurrent.h, whose kda_recurrent() is the oracle this function is tested against.
//
// Per head, tokens are processed in chunks of `chunk` rows (default 64) with 16-row sub-blocks.
// With S0 the state entering a chunk of n rows, P_r = prod_{s<=r} exp(g_s) (exp of the cumulative
// log-decay Gamma_r, restarted at each chunk):
//   L[i,j]   = beta_i * sum_d k_i[d] k_j[d] exp(Gamma_i[d] - Gamma_j[d])   (j < i)
//   Aqk[i,j] =          sum_d q_i[d] k_j[d] exp(Gamma_i[d] - Gamma_j[d])   (j <= i)
//   U = (I + L)^-1 Diag(beta) (V - (K .* P) S0)      forward substitution, row by row (= V_new)
//   O = (Q .* P) S0 + Aqk U
//   S <- Diag(P_n) S0 + (K .* exp(Gamma_n - Gamma))^T U
// Decay factors are only ever exp(Gamma_i - Gamma_j) with i >= j (<= 1): inside a 16-row diagonal
// sub-block they are running products of alpha = exp(g); between sub-blocks they factor through
// the anchor at the START of row i's sub-block (both factors <= 1). So no factor can overflow for
// any g <= 0, and no output depends on a later token: outputs at positions < P are bit-identical
// whatever the inputs at positions >= P; a call on only the first P tokens returns bit-identical
// outputs for them (no row's arithmetic depends on how many rows its chunk has); splitting a
// sequence at a multiple of `chunk` and resuming from the returned state is bit-identical to one
// call (elsewhere: equal within rounding, tested <= 2e-6). The diagonal sub-blocks use no
// exponent bound, so Kimi-Linear-style unbounded gates (tested down to -60 per token) are safe too.
// Cost ~1.3e5 FLOP per token and head at K = V = 128, C = 64 (mostly GEMM-shaped); the recurrence
// needs ~1.15e5 but as matrix-vector work.
#pragma once
#include <cstddef>

#include "kernels/dispatch.h"

namespace k3 {

/// Sub-block size of the pair matrices (rows sharing one anchor), algorithms.md §1.4.
inline constexpr int kKdaSubBlock = 16;

/// Chunkwise KDA over T tokens; same arguments and result as kda_recurrent (equal within fp32
/// rounding, tested max-rel <= 1e-5 vs the recurrence and vs an fp64 recurrence).
///   q, k, g [T, H, K]; v [T, H, V]; beta [T, H]; state [H, K, V] in/out (K-major); out [T, H, V].
/// chunk: rows per chunk, 1..1024 (K3 prefill: 64). T >= 0 (T = 0: no-op); H, K, V >= 1. Throws
/// k3::Error on invalid sizes. Heads run in parallel (parallel_for, threads.h). g must be <= 0 and
/// not NaN (-inf is fine: alpha = 0). `out` must not alias any input. Any T works, including
/// calls shorter than a chunk (model-level chunked prefill may pass 1, 8, 32, ... tokens).
void kda_chunk(int T, int H, int K, int V, const float* q, const float* k, const float* v, const float* g,
               const float* beta, float* state, float* out, int chunk = 64);

/// Same, with an explicit instruction set (tests and benches compare ISAs): Isa::Scalar is the
/// baseline x86-64 build, Avx2 and Avx512 run the AVX2 + FMA build. kda_chunk above uses
/// the calling thread's execution context's ISA (exec_config.h). Throws k3::Error when the CPU lacks `isa`.
/// Results differ between ISAs only by FMA contraction (each is causal and split-exact).
void kda_chunk(Isa isa, int T, int H, int K, int V, const float* q, const float* k, const float* v, const float* g,
               const float* beta, float* state, float* out, int chunk = 64);

namespace detail {
/// Floats of scratch one thread needs for kda_chunk_heads (kernel_table.h) at these sizes:
/// Workspace::floats(chunk, K, V) of kda_chunk_impl.h (the same on every ISA).
size_t kda_chunk_work_floats(int chunk, int K, int V);
}  // namespace detail

}  // namespace k3
