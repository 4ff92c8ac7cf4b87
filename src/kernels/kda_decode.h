// KDA delta rule, one decode step for all heads — the fast form of the recurrence for T = 1.
// Spec: algorithms.md §1.2 (update order), §1.5 (decode cost: ~7*K*V FLOP and one read + write
// of the K*V fp32 state per head; bandwidth-bound).
// Tensor conventions (dtypes, K-major state layout) are those of kernels/kda_recurrent.h with T
// = 1.
#pragma once

#include "kernels/dispatch.h"

namespace k3 {

/// One token through the KDA recurrence, every head, in the same per-element arithmetic order as
/// kda_recurrent: the baseline build (Isa::Scalar) is bit-identical to kda_recurrent with T = 1
/// as long as the compiler forms no FMAs there (true for the default x86-64 flags); the AVX2 + FMA
/// build differs by FMA contraction only (tests: max-rel <= 1e-6 for every ISA).
///   q [H, K], k [H, K], g [H, K], v [H, V], beta [H]   fp32 inputs (q normalized+scaled, g <= 0)
///   state [H, K, V] fp32, K-major, updated in place;  out [H, V] fp32 (must not alias inputs).
/// Two streaming passes over each head's state (decay + S^T k, then write + S^T q), vectorized
/// over V; heads run in parallel (parallel_for, threads.h). H, K, V >= 1 (throws k3::Error
/// otherwise). Uses the calling thread's execution context's ISA (exec_config.h).
void kda_decode_step(int H, int K, int V, const float* q, const float* k, const float* v, const float* g,
                     const float* beta, float* state, float* out);

/// Same, with an explicit instruction set (Scalar = baseline build; Avx2/Avx512 = AVX2 + FMA
/// build). Throws k3::Error when the CPU lacks `isa`.
void kda_decode_step(Isa isa, int H, int K, int V, const float* q, const float* k, const float* v, const float* g,
                     const float* beta, float* state, float* out);

}  // namespace k3
