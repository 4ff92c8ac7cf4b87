// AVX2 + FMA build of the KDA decode step (same source as the baseline: kda_decode_impl.h).
#include "kernels/avx2/kda_avx2.h"
#include "kernels/kda_decode_impl.h"

namespace k3::avx2 {

void kda_decode_heads(int h0, int h1, int K, int V, const float* q, const float* k, const float* v, const float* g,
                      const float* beta, float* state, float* out, float* scratch) {
  kda_decode_heads_impl(h0, h1, K, V, q, k, v, g, beta, state, out, scratch);
}

}  // namespace k3::avx2
