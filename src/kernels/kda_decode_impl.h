// KDA decode step, the per-head work (algorithms.md §1.2), fused into two streaming passes over
// the state. Included by kda_decode.cpp (baseline x86-64) and avx2/kda_decode.cpp (AVX2 + FMA);
// internal linkage only and no library templates (kernel_table.h's rule for ISA translation units).
#pragma once
#include <math.h>

#include <cstddef>

namespace k3 {
namespace {

// One head; acc [V] and alpha [K] are scratch. Per element the operations and their order match
// kda_recurrent (decay, e accumulated over d in increasing order, e = beta (v - e), write, o
// accumulated over d); the decayed row is recomputed in pass 2 instead of being stored in pass 1,
// so the state is read twice and written once.
void kda_decode_head(int K, int V, const float* __restrict q, const float* __restrict k, const float* __restrict v,
                     const float* __restrict g, float beta, float* __restrict S, float* __restrict o,
                     float* __restrict acc, float* __restrict alpha) {
  for (int d = 0; d < K; ++d) alpha[d] = expf(g[d]);
  for (int j = 0; j < V; ++j) acc[j] = 0.0f;
  for (int d = 0; d < K; ++d) {  // pass 1 (read only): accumulate (Diag(alpha) S)^T k
    const float a = alpha[d];
    const float kd = k[d];
    const float* __restrict row = S + static_cast<std::size_t>(d) * V;
    for (int j = 0; j < V; ++j) {
      const float s = row[j] * a;
      acc[j] += s * kd;
    }
  }
  for (int j = 0; j < V; ++j) {
    acc[j] = beta * (v[j] - acc[j]);
    o[j] = 0.0f;
  }
  for (int d = 0; d < K; ++d) {  // pass 2: the same decay again, rank-1 write, accumulate S^T q
    const float a = alpha[d];
    const float kd = k[d];
    const float qd = q[d];
    float* __restrict row = S + static_cast<std::size_t>(d) * V;
    for (int j = 0; j < V; ++j) {
      const float s = row[j] * a + kd * acc[j];
      row[j] = s;
      o[j] += s * qd;
    }
  }
}

// Heads [h0, h1); scratch: V + K floats.
void kda_decode_heads_impl(int h0, int h1, int K, int V, const float* q, const float* k, const float* v, const float* g,
                           const float* beta, float* state, float* out, float* scratch) {
  for (int h = h0; h < h1; ++h) {
    const std::size_t ok = static_cast<std::size_t>(h) * K, ov = static_cast<std::size_t>(h) * V;
    kda_decode_head(K, V, q + ok, k + ok, v + ov, g + ok, beta[h], state + static_cast<std::size_t>(h) * K * V,
                    out + ov, scratch, scratch + V);
  }
}

}  // namespace
}  // namespace k3
