// Chunkwise-parallel KDA entry points: argument checks, the ISA's kernel table entry
// (kernel_table.h kda_chunk_heads), threads over heads. The algorithm is in kda_chunk_impl.h
// (compiled by scalar/kda.cpp and avx2/kda_chunk.cpp).
#include "kernels/kda_chunk.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/exec_config.h"
#include "kernels/threads.h"

namespace k3 {

void kda_chunk(Isa isa, int T, int H, int K, int V, const float* q, const float* k, const float* v, const float* g,
               const float* beta, float* state, float* out, int chunk) {
  if (T < 0 || H < 1 || K < 1 || V < 1 || chunk < 1 || chunk > 1024)
    throw Error("kda_chunk: expected T >= 0, H, K, V >= 1 and 1 <= chunk <= 1024, got T=" + std::to_string(T) +
                " H=" + std::to_string(H) + " K=" + std::to_string(K) + " V=" + std::to_string(V) +
                " chunk=" + std::to_string(chunk));
  if (!isa_supported(isa)) throw Error(std::string("kda_chunk: ISA '") + isa_name(isa) + "' not supported on this CPU");
  if (T == 0) return;
  const KernelTable& kt = kernels_for(isa);  // AVX-512 runs the AVX2 build (avx512/table.cpp)
  // A call shorter than one chunk is one chunk of T rows: size the scratch for T (same results;
  // only leading dimensions change), so short calls (model-level chunked prefill) stay cheap.
  chunk = std::min(chunk, T);
  parallel_for(H, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> work(detail::kda_chunk_work_floats(chunk, K, V));
    kt.kda_chunk_heads(static_cast<int>(h0), static_cast<int>(h1), T, H, K, V, q, k, v, g, beta, state, out, chunk,
                       work.data());
  });
}

void kda_chunk(int T, int H, int K, int V, const float* q, const float* k, const float* v, const float* g,
               const float* beta, float* state, float* out, int chunk) {
  kda_chunk(exec_context().isa, T, H, K, V, q, k, v, g, beta, state, out, chunk);
}

}  // namespace k3
