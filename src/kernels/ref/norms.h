// Scalar reference normalizations and softmax (fp32 in/out, fp64 sums).
#pragma once
#include <cstdint>

namespace k3::ref {

/// RMSNorm (spec §3): out[i] = w[i]·x[i] / sqrt(mean(x²) + eps); w == nullptr means no weight.
/// x, out: [n] (may alias); w: [n].
void rmsnorm(const float* x, int64_t n, const float* w, float eps, float* out);

/// Returns 1 / sqrt(mean(x²) + eps) over x [n].
double rms_inv(const float* x, int64_t n, float eps);

/// L2 normalization with eps inside the square root (spec §3.2 step 3):
/// out[i] = x[i] / sqrt(Σ x² + eps). x, out: [n] (may alias).
void l2norm(const float* x, int64_t n, float eps, float* out);

/// Numerically stable softmax over x [n] into out [n] (may alias), fp32 result.
/// NaN inputs propagate; an all −inf row gives NaN (not produced by the model).
void softmax(const float* x, int64_t n, float* out);

}  // namespace k3::ref
