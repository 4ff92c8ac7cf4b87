#include "kernels/ref/norms.h"

#include <cmath>

namespace k3::ref {

double rms_inv(const float* x, int64_t n, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  return 1.0 / std::sqrt(ss / static_cast<double>(n) + static_cast<double>(eps));
}

void rmsnorm(const float* x, int64_t n, const float* w, float eps, float* out) {
  const double inv = rms_inv(x, n, eps);
  for (int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(x[i]) * inv;
    out[i] = static_cast<float>(w ? v * w[i] : v);
  }
}

void l2norm(const float* x, int64_t n, float eps, float* out) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(ss + static_cast<double>(eps));
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i] * inv);
}

void softmax(const float* x, int64_t n, float* out) {
  if (n <= 0) return;
  bool has_nan = false;
  float m = x[0];
  for (int64_t i = 0; i < n; ++i) {
    has_nan |= std::isnan(x[i]);
    m = std::fmax(m, x[i]);
  }
  if (has_nan) {
    for (int64_t i = 0; i < n; ++i) out[i] = NAN;
    return;
  }
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - m);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(std::exp(static_cast<double>(x[i]) - m) / sum);
}

}  // namespace k3::ref
