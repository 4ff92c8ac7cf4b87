// Gated MLA attention over the latent cache as named ops (spec k3-architecture.md §3.3): the
// per-token work of model/mla.cpp's fast path, so a second backend or a tensor-parallel split
// (a slice of the heads) replaces these calls, not the sublayer. Both run the kernel table of
// the calling thread's execution context (exec_config.h); fp32 arithmetic. Tested against the
// k3::ref attention of model/mla.cpp (tests/model/test_components.cpp, test_fast_path.cpp) and
// against each other (tests/kernels/test_mla_attend.cpp).
//
// Shapes (outermost first, fp32 unless stated): q [T, H, dn + dr] (per head q_nope then q_rope);
// cache rows [n_past + T, kvr + dr] (the normalized latent c, then the raw k_r; the T rows of
// these queries already appended), stored as one of the core/mla_cache_type.h encodings;
// o [T, H, dv]. Query t attends to rows [0, n_past + t]. Scores are scaled by 1/sqrt(dn + dr)
// (NoPE, no mscale).
//
// Both ops split the context into pieces whose boundaries depend only on the shapes (never on
// the thread count), compute a partial softmax per piece and merge the pieces in a fixed order
// (flash attention / flash-decoding), so results are bit-identical for any number of threads.
#pragma once
#include <cstdint>
#include <string>

#include "core/mla_cache_type.h"
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

/// Encodes x [n, kvr + dr] fp32 into out [n, mla_cache_row_bytes(t, kvr, dr)] bytes.
void mla_cache_encode(MlaCacheType t, const float* x, int64_t n, int64_t kvr, int64_t dr, uint8_t* out);
/// Decodes rows [n, row_bytes] of type t into out [n, kvr + dr] fp32 (exact for F32).
void mla_cache_decode(MlaCacheType t, const uint8_t* rows, int64_t n, int64_t kvr, int64_t dr, float* out);

/// The cache rows an attention op reads: `data` holds rows of mla_cache_row_bytes(type, kvr, dr)
/// bytes each (F32 rows 4-byte aligned).
struct MlaRows {
  const uint8_t* data = nullptr;
  MlaCacheType type = MlaCacheType::F32;
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

/// Absorbed attention (spec §3.3 "Absorbed decode"), flash-decoding over the context: per head
/// and query, qcat = scale·[W_kb,hᵀ q_nope ; q_rope] [kvr + dr]; the query's visible rows are cut
/// into chunks of mla_decode_chunk(n_ctx) rows, processed in parallel (scores qcat·row, an
/// online softmax and ctx = Σ p·c [kvr] per chunk and head), merged in chunk order; o = W_vb,h ctx
/// [dv]. The W rows are widened from BF16 exactly. No checks (the sublayer validated the cache);
/// T >= 1.
void mla_attend_absorbed(const MlaKvbHalves& kv_b, const MlaAttnShape& s, const float* q, int64_t T,
                         const MlaRows& rows, int64_t n_past, float* o);

/// Rows per flash-decoding chunk for a query that sees n_ctx rows: at least 512, at most 64
/// chunks (a multiple of 256). A function of n_ctx only.
int64_t mla_decode_chunk(int64_t n_ctx);

/// Expanded attention (prefill), tiled (flash attention, Dao et al. 2022): the cache is read in
/// tiles of 128 rows at absolute positions; per tile and head, k_nope and v of its rows are
/// expanded once (one fp32 GEMM with W_kb,h and W_vb,h widened exactly from BF16), then every
/// block of 32 queries that sees the tile gets its scores (fp32 GEMM), a causal online softmax
/// and its output update (fp32 GEMM). Work items are (head, segment of 8 tiles), run in waves of
/// ceil(16/H) segments, each keeping a running max/sum/output per query; after a wave its
/// segments are merged into the result in segment order. Scratch: O(T·H·dv·ceil(16/H) + W),
/// independent of n_past. A query's result depends only on its own position and the rows it
/// sees, not on T, n_past or the thread count (prompts cut into different calls give the same
/// bits). Same contract as mla_attend_absorbed; equal within fp32 rounding.
void mla_attend_expanded(const MlaKvbHalves& kv_b, const MlaAttnShape& s, const float* q, int64_t T,
                         const MlaRows& rows, int64_t n_past, float* o);

}  // namespace k3
