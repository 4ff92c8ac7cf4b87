// k3::vec — dispatched fp32 vector primitives for the forward pass's per-token work (norms,
// gates, activations, softmax, attention dot products, the KDA short convolution). Unlike ops.h
// these are single-threaded and unchecked (n >= 0 and valid pointers are the caller's contract):
// they sit inside loops over tokens and heads that the caller already parallelises.
//
// Every function runs the kernel table of the calling thread's execution context
// (exec_config.h: ExecConfig::isa, one per model). The scalar
// ISA is the portable build of the same source; tests/kernels/test_vec.cpp compares every ISA
// with the fp64 oracles of kernels/ref (norms.h, activations.h) at the tolerances stated there.
// Accumulation is fp32 (the order of the partial sums is ISA-dependent); exp is the Cephes
// polynomial (relative error <= 1.4·2^-24 measured on [ln FLT_MIN, ln FLT_MAX]; σ <= 3.4·2^-24,
// SiLU <= 4·2^-24). At or below ln FLT_MIN (−87.34) exp gives exactly 0 (no subnormal results, so
// exp(−inf) = 0), above ln FLT_MAX (88.72) +inf; NaN inputs propagate.
//
// Shapes: every pointer is a contiguous fp32 vector [n] unless stated. "may alias" means the
// output may be the same buffer as that input (exactly, not partially overlapping).
// Spec: k3-architecture.md §3 (RMSNorm, σ, SiLU, softmax), §3.2 (KDA conv, L2 norm, gates).
#pragma once
#include <cstdint>

namespace k3::vec {

/// Σ a[i]·b[i] in fp32.
float dot(const float* a, const float* b, int64_t n);

/// Σ x[i]² in fp32.
float sum_sq(const float* x, int64_t n);

/// y[i] += a·x[i].
void axpy(float a, const float* x, float* y, int64_t n);

/// y[i] = a·x[i] (may alias).
void scale(const float* x, float a, float* y, int64_t n);

/// y[i] = σ(x[i]) = 1/(1+e^{−x}) (may alias). Saturates to exactly 0/1 far out, never NaN for
/// finite or infinite x.
void sigmoid(const float* x, float* y, int64_t n);

/// y[i] = x[i]·σ(x[i]) (SiLU; may alias). SiLU(−inf) = 0 (the limit), SiLU(+inf) = +inf.
void silu(const float* x, float* y, int64_t n);

/// y[i] *= σ(g[i]) (the output gates of KDA and MLA).
void mul_sigmoid(const float* g, float* y, int64_t n);

/// y[i] = e^{x[i]} (may alias).
void exp(const float* x, float* y, int64_t n);

/// In-place numerically stable softmax over x [n] (max subtracted, fp32 sum). n >= 1.
void softmax(float* x, int64_t n);

/// One step of the online (streaming) softmax of flash attention (Dao et al. 2022, "FlashAttention",
/// Alg. 1; Milakov & Gimelshein 2018): x [n] holds one query's scores against a tile of keys of
/// which the first n_vis (1 <= n_vis <= n) are visible; *m and *l are the query's running max and
/// sum of exponentials over earlier tiles (-inf and 0 before the first). In place:
/// m' = max(*m, max x[0:n_vis]); x[j] = e^{x[j] − m'} for j < n_vis, 0 for j >= n_vis;
/// *l = *l·e^{*m − m'} + Σ x; *m = m'. Returns α = e^{m_old − m'} (0 on the first step), the
/// factor the caller applies to its running output row. fp32, the partial sums of softmax().
float softmax_online(float* x, int64_t n_vis, int64_t n, float* m, float* l);

/// RMSNorm (spec §3): y[i] = w[i]·x[i] / sqrt(mean(x²) + eps); w == nullptr means no weight.
/// May alias.
void rmsnorm(const float* x, const float* w, float eps, float* y, int64_t n);

/// L2 norm with eps inside the root, times a scale (spec §3.2 step 3):
/// y[i] = s·x[i] / sqrt(Σ x² + eps). May alias.
void l2norm(const float* x, float eps, float s, float* y, int64_t n);

/// Causal depthwise convolution + SiLU over T tokens (spec §3.2 step 2), fp32.
/// ext: [K−1+T, C] (the K−1 window rows, oldest first, then the T new rows);
/// taps: [K, C] (tap j multiplies row t+j for output token t; tap K−1 is the newest);
/// out: [T, C] = SiLU(Σ_j taps[j]·ext[t+j]). out must not alias ext.
void short_conv_silu(const float* ext, const float* taps, int64_t T, int64_t C, int64_t K, float* out);

/// fp32 matrix product C [m, n] = A [m, k] · B [k, n] (or C += … when accumulate), all
/// row-major with leading dimensions lda, ldb, ldc (elements). Register-blocked (4 rows × two
/// vectors of columns, FMA where the ISA has it); each C element is one fp32 chain over k in
/// order. Used for attention (scores = Q·Kᵀ with K stored transposed, out = P·V). C must not
/// alias A or B.
void gemm_nn(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t n,
             int64_t k, bool accumulate);

}  // namespace k3::vec
