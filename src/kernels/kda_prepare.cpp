#include "kernels/kda_prepare.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/ref/activations.h"
#include "kernels/threads.h"
#include "kernels/vec.h"

namespace k3 {

float kda_log_decay(float z, float dt_bias, float a_log, std::optional<float> lower_bound) {
  const float pre = z + dt_bias;
  if (lower_bound) return *lower_bound * ref::sigmoid(std::exp(a_log) * pre);
  return -std::exp(a_log) * ref::softplus(pre);
}

void kda_prepare(const KdaPrepShape& sh, std::span<const KdaPiece> pieces, const float* taps, const float* z,
                 const float* dt_bias, const float* a_log, const float* b, float* q, float* k, float* v, float* g,
                 float* beta) {
  const int64_t H = sh.H, d = sh.d, K = sh.K, W = K - 1, C = H * d;
  if (pieces.empty()) return;
  const int64_t T = pieces.back().row0 + pieces.back().T;
  float* outs[3] = {q, k, v};
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> ea(static_cast<size_t>(H));
  for (int64_t h = 0; h < H; ++h) ea[h] = std::exp(a_log[h]);
  // ~3·K conv multiply-adds, 4 norm operations and ~20 for the gate's σ per channel.
  parallel_for(T, grain_for_work(1, C * (3 * K + 24)), [&](int64_t t0, int64_t t1) {
    const int64_t n = t1 - t0;
    // The conv, split at piece boundaries: rows [a, e) of piece s.
    int64_t s =
        std::upper_bound(pieces.begin(), pieces.end(), t0, [](int64_t t, const KdaPiece& r) { return t < r.row0; }) -
        pieces.begin() - 1;
    for (int64_t a = t0; a < t1; ++s) {
      const int64_t e = std::min(t1, pieces[s].row0 + pieces[s].T), Ts = pieces[s].T;
      for (int64_t i = 0; i < 3; ++i)
        vec::short_conv_silu(pieces[s].ext + (i * (W + Ts) + a - pieces[s].row0) * C, taps + i * K * C, e - a, C, K,
                             outs[i] + a * C);
      a = e;
    }
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t h = 0; h < H; ++h) {
        float* qh = q + t * C + h * d;
        float* kh = k + t * C + h * d;
        vec::l2norm(qh, sh.l2_eps, q_scale, qh, d);
        vec::l2norm(kh, sh.l2_eps, 1.0f, kh, d);
      }
    float* gt = g + t0 * C;
    if (sh.lower_bound) {
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t c = 0; c < C; ++c) g[t * C + c] = ea[c / d] * (z[t * C + c] + dt_bias[c]);
      vec::sigmoid(gt, gt, n * C);
      vec::scale(gt, *sh.lower_bound, gt, n * C);
    } else {
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t c = 0; c < C; ++c)
          g[t * C + c] = kda_log_decay(z[t * C + c], dt_bias[c], a_log[c / d], sh.lower_bound);
    }
    vec::sigmoid(b + t0 * H, beta + t0 * H, n * H);
  });
}

void kda_output_gate(const KdaPrepShape& sh, int64_t T, const float* o_norm, float eps, const float* gate, float* o) {
  const int64_t H = sh.H, d = sh.d, C = H * d;
  parallel_for(T, grain_for_work(1, 32 * C), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        float* oh = o + t * C + h * d;
        vec::rmsnorm(oh, o_norm, eps, oh, d);
      }
      vec::mul_sigmoid(gate + t * C, o + t * C, C);
    }
  });
}

}  // namespace k3
