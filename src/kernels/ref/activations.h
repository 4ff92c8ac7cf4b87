// Scalar reference activations (fp32 in/out; see spec k3-architecture.md §3.2, §3.4).
#pragma once
#include <cmath>
#include <cstdint>
#include <optional>

namespace k3::ref {

/// Logistic sigmoid σ(x) = 1/(1+e^−x), evaluated without overflow for any x.
inline float sigmoid(float x) {
  if (x >= 0.f) return 1.f / (1.f + std::exp(-x));
  const float e = std::exp(x);
  return e / (1.f + e);
}

/// SiLU(x) = x·σ(x).
inline float silu(float x) { return x * sigmoid(x); }

/// softplus(x) = log(1 + e^x), overflow-free: max(x, 0) + log1p(e^−|x|).
inline float softplus(float x) { return std::fmax(x, 0.f) + std::log1p(std::exp(-std::fabs(x))); }

/// SiTU-GLU (spec §3.4): β1·tanh(g/β1)·σ(g) · (β2·tanh(u/β2) if β2 given, else u).
/// σ takes the raw g. Example (β1 = 4, β2 = 25): situ(1, 1) = 0.715818, situ(−1, 2) = −0.525829,
/// situ(10, 100) = 98.590782, situ(0, 5) = 0.
inline float situ(float g, float u, float beta, std::optional<float> linear_beta) {
  const float a = beta * std::tanh(g / beta) * sigmoid(g);
  const float b = linear_beta ? *linear_beta * std::tanh(u / *linear_beta) : u;
  return a * b;
}

/// SwiGLU: SiLU(g)·u (Kimi-Linear-family configs with hidden_act "silu").
inline float swiglu(float g, float u) { return silu(g) * u; }

/// In place over n elements.
void sigmoid_inplace(float* x, int64_t n);

}  // namespace k3::ref
