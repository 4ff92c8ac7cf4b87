// Baseline x86-64 builds of the KDA kernels (translation unit scalar/kda.cpp, compiled from the
// same sources as the AVX2 build: kda_chunk_impl.h, kda_decode_impl.h). No argument checks:
// kda_chunk / kda_decode_step validate and then split heads over threads. Arguments as in
// kernel_table.h (kda_chunk_heads, kda_decode_heads).
#pragma once

namespace k3::scalar {

void kda_chunk_heads(int h0, int h1, int T, int H, int K, int V, const float* q, const float* k, const float* v,
                     const float* g, const float* beta, float* state, float* out, int chunk, float* work);

void kda_decode_heads(int h0, int h1, int K, int V, const float* q, const float* k, const float* v, const float* g,
                      const float* beta, float* state, float* out, float* scratch);

}  // namespace k3::scalar
