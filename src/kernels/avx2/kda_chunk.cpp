// AVX2 + FMA build of the chunkwise KDA kernel (same source as the baseline: kda_chunk_impl.h).
#include "kernels/avx2/kda_avx2.h"
#include "kernels/kda_chunk_impl.h"

namespace k3::avx2 {

void kda_chunk_heads(int h0, int h1, int T, int H, int K, int V, const float* q, const float* k, const float* v,
                     const float* g, const float* beta, float* state, float* out, int chunk, float* work) {
  kda_chunk_heads_impl(h0, h1, T, H, K, V, q, k, v, g, beta, state, out, chunk, work);
}

}  // namespace k3::avx2
