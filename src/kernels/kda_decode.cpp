// KDA decode step entry points: argument checks, ISA choice, threads over heads.
// The per-head work is in kda_decode_impl.h (shared by the baseline and AVX2 builds).
#include "kernels/kda_decode.h"

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/avx2/kda_avx2.h"
#include "kernels/kda_decode_impl.h"
#include "kernels/threads.h"

namespace k3 {

void kda_decode_step(Isa isa, int H, int K, int V, const float* q, const float* k, const float* v,
                     const float* g, const float* beta, float* state, float* out) {
  if (H < 1 || K < 1 || V < 1)
    throw Error("kda_decode_step: expected H, K, V >= 1, got H=" + std::to_string(H) +
                " K=" + std::to_string(K) + " V=" + std::to_string(V));
  if (!isa_supported(isa))
    throw Error(std::string("kda_decode_step: ISA '") + isa_name(isa) +
                "' not supported on this CPU");
  const bool wide = isa != Isa::Scalar;
  // Grain: about 64 Ki state elements (256 KiB) per task, so tiny heads stay on one thread.
  const int64_t grain = 1 + (int64_t{1} << 16) / (static_cast<int64_t>(K) * V);
  parallel_for(H, grain, [&](int64_t h0, int64_t h1) {
    std::vector<float> scratch(static_cast<std::size_t>(V) + static_cast<std::size_t>(K));
    if (wide)
      avx2::kda_decode_heads(static_cast<int>(h0), static_cast<int>(h1), K, V, q, k, v, g, beta,
                             state, out, scratch.data());
    else
      kda_decode_heads_impl(static_cast<int>(h0), static_cast<int>(h1), K, V, q, k, v, g, beta,
                            state, out, scratch.data());
  });
}

void kda_decode_step(int H, int K, int V, const float* q, const float* k, const float* v,
                     const float* g, const float* beta, float* state, float* out) {
  kda_decode_step(active_isa(), H, K, V, q, k, v, g, beta, state, out);
}

}  // namespace k3
