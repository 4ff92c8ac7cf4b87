// KDA recurrent oracle (algorithms.md §1.2). Deliberately plain: no SIMD, no threads.
#include "kernels/kda_recurrent.h"

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "core/error.h"

namespace k3 {

void kda_recurrent(int T, int H, int K, int V, const float* q, const float* k, const float* v, const float* g,
                   const float* beta, float* state, float* out) {
  if (T < 0 || H < 1 || K < 1 || V < 1)
    throw Error("kda_recurrent: expected T >= 0 and H, K, V >= 1, got T=" + std::to_string(T) +
                " H=" + std::to_string(H) + " K=" + std::to_string(K) + " V=" + std::to_string(V));
  const std::size_t hk = static_cast<std::size_t>(H) * K;
  const std::size_t hv = static_cast<std::size_t>(H) * V;
  std::vector<float> e(static_cast<std::size_t>(V));
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      const float* qt = q + t * hk + static_cast<std::size_t>(h) * K;
      const float* kt = k + t * hk + static_cast<std::size_t>(h) * K;
      const float* gt = g + t * hk + static_cast<std::size_t>(h) * K;
      const float* vt = v + t * hv + static_cast<std::size_t>(h) * V;
      const float bt = beta[static_cast<std::size_t>(t) * H + h];
      float* S = state + static_cast<std::size_t>(h) * K * V;
      float* ot = out + t * hv + static_cast<std::size_t>(h) * V;
      // 1. decay
      for (int d = 0; d < K; ++d) {
        const float a = std::exp(gt[d]);
        for (int j = 0; j < V; ++j) S[static_cast<std::size_t>(d) * V + j] *= a;
      }
      // 2. e = v - S^T k
      for (int j = 0; j < V; ++j) e[j] = 0.0f;
      for (int d = 0; d < K; ++d)
        for (int j = 0; j < V; ++j) e[j] += S[static_cast<std::size_t>(d) * V + j] * kt[d];
      for (int j = 0; j < V; ++j) e[j] = bt * (vt[j] - e[j]);
      // 3. S += k (beta e)^T
      for (int d = 0; d < K; ++d)
        for (int j = 0; j < V; ++j) S[static_cast<std::size_t>(d) * V + j] += kt[d] * e[j];
      // 4. o = S^T q
      for (int j = 0; j < V; ++j) ot[j] = 0.0f;
      for (int d = 0; d < K; ++d)
        for (int j = 0; j < V; ++j) ot[j] += S[static_cast<std::size_t>(d) * V + j] * qt[d];
    }
  }
}

}  // namespace k3
