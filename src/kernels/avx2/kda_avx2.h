// AVX2 + FMA builds of the KDA kernels (translation units avx2/kda_chunk.cpp, avx2/kda_decode.cpp,
// compiled from the same sources as the baseline: kda_chunk_impl.h, kda_decode_impl.h).
// Only call when isa_supported(Isa::Avx2). No argument checks: kda_chunk / kda_decode_step
// validate and then split heads over threads. Arguments as in kernels/kda_chunk.h.
#pragma once

namespace k3::avx2 {

/// kda_chunk restricted to heads [h0, h1) (algorithms.md §1.3); work: scratch of
/// Workspace::floats(chunk, K, V) floats (kda_chunk_impl.h), owned by the caller.
void kda_chunk_heads(int h0, int h1, int T, int H, int K, int V, const float* q, const float* k, const float* v,
                     const float* g, const float* beta, float* state, float* out, int chunk, float* work);

/// kda_decode_step restricted to heads [h0, h1) (algorithms.md §1.2); scratch: V + K floats.
void kda_decode_heads(int h0, int h1, int K, int V, const float* q, const float* k, const float* v, const float* g,
                      const float* beta, float* state, float* out, float* scratch);

}  // namespace k3::avx2
