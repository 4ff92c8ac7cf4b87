#include "kernels/attn_res_mix.h"

#include <cmath>

#include "core/error.h"
#include "kernels/threads.h"
#include "kernels/vec.h"

namespace k3 {

void attn_res_mix_fast(const std::vector<const float*>& sources, int64_t T, int64_t D, const float* score, float eps,
                       float* out, float* weights) {
  const int64_t n = static_cast<int64_t>(sources.size());
  if (n == 0) throw Error("AttnRes mix: no sources");
  // Per token: n dot products + n sums of squares + the weighted sum: ~3·n·D element operations.
  parallel_for(T, grain_for_work(1, 3 * n * D), [&](int64_t t0, int64_t t1) {
    std::vector<float> p(static_cast<size_t>(n));
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t j = 0; j < n; ++j) {
        const float* v = sources[j] + t * D;
        const float ms = vec::sum_sq(v, D) / static_cast<float>(D);
        p[j] = vec::dot(score, v, D) / std::sqrt(ms + eps);
      }
      vec::softmax(p.data(), n);
      float* o = out + t * D;
      vec::scale(sources[0] + t * D, p[0], o, D);
      for (int64_t j = 1; j < n; ++j) vec::axpy(p[j], sources[j] + t * D, o, D);
      if (weights)
        for (int64_t j = 0; j < n; ++j) weights[t * n + j] = p[j];
    }
  });
}

}  // namespace k3
