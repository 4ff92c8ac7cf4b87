// Baseline build of the KDA kernels (same sources as the AVX2 build).
#include "kernels/kda_chunk_impl.h"
#include "kernels/kda_decode_impl.h"
#include "kernels/kda_chunk.h"
#include "kernels/scalar/kda_scalar.h"

namespace k3::scalar {

void kda_chunk_heads(int h0, int h1, int T, int H, int K, int V, const float* q, const float* k, const float* v,
                     const float* g, const float* beta, float* state, float* out, int chunk, float* work) {
  kda_chunk_heads_impl(h0, h1, T, H, K, V, q, k, v, g, beta, state, out, chunk, work);
}

void kda_decode_heads(int h0, int h1, int K, int V, const float* q, const float* k, const float* v, const float* g,
                      const float* beta, float* state, float* out, float* scratch) {
  kda_decode_heads_impl(h0, h1, K, V, q, k, v, g, beta, state, out, scratch);
}

}  // namespace k3::scalar

namespace k3::detail {
size_t kda_chunk_work_floats(int chunk, int K, int V) { return Workspace::floats(chunk, K, V); }
}  // namespace k3::detail
