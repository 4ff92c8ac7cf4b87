// Chunkwise-parallel KDA entry points: argument checks, ISA choice, threads over heads.
// The algorithm itself is in kda_chunk_impl.h (shared by the baseline and AVX2 builds).
#include "kernels/kda_chunk.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/avx2/kda_avx2.h"
#include "kernels/kda_chunk_impl.h"
#include "kernels/threads.h"

namespace k3 {

void kda_chunk(Isa isa, int T, int H, int K, int V, const float* q, const float* k, const float* v,
               const float* g, const float* beta, float* state, float* out, int chunk) {
  if (T < 0 || H < 1 || K < 1 || V < 1 || chunk < 1 || chunk > 1024)
    throw Error("kda_chunk: expected T >= 0, H, K, V >= 1 and 1 <= chunk <= 1024, got T=" +
                std::to_string(T) + " H=" + std::to_string(H) + " K=" + std::to_string(K) +
                " V=" + std::to_string(V) + " chunk=" + std::to_string(chunk));
  if (!isa_supported(isa))
    throw Error(std::string("kda_chunk: ISA '") + isa_name(isa) + "' not supported on this CPU");
  if (T == 0) return;
  // AVX-512 machines run the AVX2 build: an AVX-512 build is future work (the development
  // machine has no AVX-512 to test or time it on).
  const bool wide = isa != Isa::Scalar;
  // A call shorter than one chunk is one chunk of T rows: size the scratch for T (same results;
  // only leading dimensions change), so short calls (model-level chunked prefill) stay cheap.
  chunk = std::min(chunk, T);
  parallel_for(H, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> work(Workspace::floats(chunk, K, V));
    if (wide)
      avx2::kda_chunk_heads(static_cast<int>(h0), static_cast<int>(h1), T, H, K, V, q, k, v, g,
                            beta, state, out, chunk, work.data());
    else
      kda_chunk_heads_impl(static_cast<int>(h0), static_cast<int>(h1), T, H, K, V, q, k, v, g, beta,
                           state, out, chunk, work.data());
  });
}

void kda_chunk(int T, int H, int K, int V, const float* q, const float* k, const float* v,
               const float* g, const float* beta, float* state, float* out, int chunk) {
  kda_chunk(active_isa(), T, H, K, V, q, k, v, g, beta, state, out, chunk);
}

}  // namespace k3
