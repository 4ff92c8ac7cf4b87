// Gated MLA attention over the latent cache as named ops (spec k3-architecture.md §3.3): the
// per-token work of model/mla.cpp's fast path, so a second backend or a tensor-parallel split
// (a slice of the heads) replaces these calls, not the sublayer. Both run the kernel table of
// the calling thread's execution context (exec_config.h) with heads split across its workers;
// fp32 throughout. Tested against the k3::ref attention of model/mla.cpp
// (tests/model/test_components.cpp, test_fast_path.cpp).
//
// Shapes (outermost first, fp32 unless stated): q [T, H, dn + dr] (per head q_nope then q_rope);
// cache rows [n_past + T, kvr + dr] (the normalized latent c, then the raw k_r; the T rows of
// these queries already appended); o [T, H, dv]. Query t attends to rows [0, n_past + t].
// Scores are scaled by 1/sqrt(dn + dr) (NoPE, no mscale).
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace k3 {

/// MLA head sizes.
struct MlaAttnShape {
  int64_t H = 0;    ///< heads
  int64_t dn = 0;   ///< qk_nope_head_dim
  int64_t dr = 0;   ///< qk_rope_head_dim (unrotated)
  int64_t dv = 0;   ///< v_head_dim
  int64_t kvr = 0;  ///< kv_lora_rank
};

/// kv_b (BF16 [H·(dn + dv), kvr], per head the dn rows of W_kb,h then the dv rows of W_vb,h)
/// split into its two halves as views into the weight's bytes (no copy, 0 bytes extra): head
/// h's W_kb,h [dn, kvr] starts at k_nope + h·head_stride, its W_vb,h [dv, kvr] at
/// v + h·head_stride; row stride kvr elements. Built once per layer at model construction
/// (model/mla.h mla_split_kv_b).
struct MlaKvbHalves {
  const uint16_t* k_nope = nullptr;
  const uint16_t* v = nullptr;
  int64_t head_stride = 0;  ///< elements between heads: (dn + dv)·kvr
  std::string name;         ///< the weight's name (errors, profiles)
};

/// Absorbed attention (spec §3.3 "Absorbed decode"): per head and query,
/// qcat = scale·[W_kb,hᵀ q_nope ; q_rope] [kvr + dr]; p = softmax(qcat · cache rows);
/// ctx = Σ p·c [kvr]; o = W_vb,h ctx [dv]. The W_kb,h rows are widened from BF16 exactly.
/// No checks (the sublayer validated the cache); T >= 1.
void mla_attend_absorbed(const MlaKvbHalves& kv_b, const MlaAttnShape& s, const float* q, int64_t T,
                         const float* cache_rows, int64_t n_past, float* o);

/// Expanded attention (prefill): k_nope and v of every cache row from one GEMM with the whole
/// kv_b (k3::matmul: BF16, or its load-time quantization), then per head and block of 32
/// queries two fp32 GEMMs (scores against the transposed keys, output from the values) with a
/// causal softmax. Same contract as mla_attend_absorbed; equal within fp32 rounding.
void mla_attend_expanded(const TensorView& kv_b, const MlaAttnShape& s, const float* q, int64_t T,
                         const float* cache_rows, int64_t n_past, float* o);

}  // namespace k3
