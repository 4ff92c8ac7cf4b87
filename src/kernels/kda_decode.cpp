// KDA decode step entry points: argument checks, the ISA's kernel table entry (kernel_table.h
// kda_decode_heads), threads over heads. The per-head work is in kda_decode_impl.h (compiled by
// scalar/kda.cpp and avx2/kda_decode.cpp).
#include "kernels/kda_decode.h"

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/exec_config.h"
#include "kernels/threads.h"

namespace k3 {

void kda_decode_step(Isa isa, int H, int K, int V, const float* q, const float* k, const float* v, const float* g,
                     const float* beta, float* state, float* out) {
  if (H < 1 || K < 1 || V < 1)
    throw Error("kda_decode_step: expected H, K, V >= 1, got H=" + std::to_string(H) + " K=" + std::to_string(K) +
                " V=" + std::to_string(V));
  if (!isa_supported(isa))
    throw Error(std::string("kda_decode_step: ISA '") + isa_name(isa) + "' not supported on this CPU");
  const KernelTable& kt = kernels_for(isa);  // AVX-512 runs the AVX2 build (avx512/table.cpp)
  // Grain: about 64 Ki state elements (256 KiB) per task, so tiny heads stay on one thread.
  const int64_t grain = 1 + (int64_t{1} << 16) / (static_cast<int64_t>(K) * V);
  parallel_for(H, grain, [&](int64_t h0, int64_t h1) {
    std::vector<float> scratch(static_cast<std::size_t>(V) + static_cast<std::size_t>(K));
    kt.kda_decode_heads(static_cast<int>(h0), static_cast<int>(h1), K, V, q, k, v, g, beta, state, out, scratch.data());
  });
}

void kda_decode_step(int H, int K, int V, const float* q, const float* k, const float* v, const float* g,
                     const float* beta, float* state, float* out) {
  kda_decode_step(exec_context().isa, H, K, V, q, k, v, g, beta, state, out);
}

}  // namespace k3
