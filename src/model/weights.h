// Binding of checkpoint tensors to per-layer weight structs (spec k3-architecture.md §2).
// Large matrices stay in the mapped files (TensorView pointers, never copied); small vectors
// (norm weights, conv taps, dt_bias, A_log, router bias, AttnRes score vectors) are decoded to
// fp32 once at bind time. Every tensor is looked up through the tensor table
// (io/tensor_table.h: tensor_spec by TensorRole gives its name, shape and dtypes) and checked with
// the table's one acceptance rule, the rule Checkpoint::open validates with; a mismatch throws
// k3::Error naming the tensor, the expected and the found dtype/shape.
#pragma once
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/anon_pages.h"
#include "core/comm.h"
#include "core/tensor.h"
#include "io/checkpoint.h"
#include "io/config.h"
#include "io/expert_store.h"
#include "kernels/q8q4_trunk.h"

namespace k3 {

/// One AttnRes mix point (spec §3.1): score = res_norm.weight ⊙ res_proj.weight, [D] fp32.
struct AttnResWeights {
  std::vector<float> score;
};

/// KDA layer (spec §3.2); H = kda_num_heads, d = kda_head_dim, C = H·d, K = short_conv_kernel_size.
struct KdaWeights {
  const TensorView* q_proj = nullptr;         ///< BF16 [C, D]
  const TensorView* k_proj = nullptr;         ///< BF16 [C, D]
  const TensorView* v_proj = nullptr;         ///< BF16 [C, D]
  std::vector<float> q_conv, k_conv, v_conv;  ///< [C, K] taps, tap 0 = oldest (stored F32 [C,1,K])
  const TensorView* f_a = nullptr;            ///< BF16 [d, D]  decay-gate low rank A
  const TensorView* f_b = nullptr;            ///< BF16 [C, d]  decay-gate low rank B
  const TensorView* b_proj = nullptr;         ///< BF16 [H, D]  beta
  const TensorView* g_proj = nullptr;         ///< BF16 [C, D]  full-rank output gate
  std::vector<float> dt_bias;                 ///< [C]
  std::vector<float> a_log;                   ///< [H] (first H entries of the stored, possibly padded, A_log)
  std::vector<float> o_norm;                  ///< [d] per-head RMSNorm weight shared by all heads
  const TensorView* o_proj = nullptr;         ///< BF16 [D, C]; null under the head split (then o_proj_rows)
  /// Under the head split (model/k3_model.cpp): this rank's rows of o_proj, [D_r, C_all] (the
  /// other fields then hold this rank's heads only: C = its heads · d); else null.
  const TensorView* o_proj_rows = nullptr;
};

/// Gated NoPE MLA layer (spec §3.3); Hm heads, dn/dr/dv head dims, ranks qr/kvr.
struct MlaWeights {
  const TensorView* q_a = nullptr;     ///< BF16 [qr, D]
  std::vector<float> q_a_norm;         ///< [qr]
  const TensorView* q_b = nullptr;     ///< BF16 [Hm·(dn+dr), qr]
  const TensorView* kv_a = nullptr;    ///< BF16 [kvr+dr, D]
  std::vector<float> kv_a_norm;        ///< [kvr]
  const TensorView* kv_b = nullptr;    ///< BF16 [Hm·(dn+dv), kvr]
  const TensorView* g_proj = nullptr;  ///< BF16 [Hm·dv, D]; nullptr when mla_use_output_gate is false
  const TensorView* o_proj = nullptr;  ///< BF16 [D, Hm·dv]; null under the head split (then o_proj_rows)
  /// Under the head split: this rank's rows of o_proj, [D_r, Hm_all·dv] (q_b, kv_b, g_proj then
  /// hold this rank's heads' rows); else null.
  const TensorView* o_proj_rows = nullptr;
};

/// A SiTU-GLU MLP: dense layer-0 MLP or the fused shared experts (spec §3.5, §3.6 step 7).
struct GluMlpWeights {
  const TensorView* gate = nullptr;  ///< BF16 [I, D]
  const TensorView* up = nullptr;    ///< BF16 [I, D]
  const TensorView* down = nullptr;  ///< BF16 [D, I]; null under the column split (then down_rows)
  /// Under the column split (model/k3_model.cpp): this rank's rows of down, [D_r, I_all] (gate and
  /// up then hold this rank's intermediate columns' rows); else null.
  const TensorView* down_rows = nullptr;
};

/// One routed expert: MXFP4 w1 (gate) [Im, L], w3 (up) [Im, L], w2 (down) [L, Im].
struct ExpertWeights {
  Mxfp4Matrix w1, w2, w3;
};

/// Stable LatentMoE (spec §3.6); E experts, latent width L.
struct MoeWeights {
  const TensorView* router = nullptr;   ///< BF16 [E, D] (gate.weight)
  std::vector<float> bias;              ///< [E] e_score_correction_bias
  const TensorView* down = nullptr;     ///< BF16 [L, D] routed_expert_down_proj
  std::vector<float> latent_norm;       ///< [L]; empty when latent_moe_use_norm is false
  const TensorView* up = nullptr;       ///< BF16 [D, L] routed_expert_up_proj
  std::optional<GluMlpWeights> shared;  ///< width num_shared_experts·moe_intermediate_size
  std::vector<ExpertWeights> experts;   ///< [E] (views into the mapping; unused when streamed)
  /// When set, routed experts are read from the shards through this store (io/expert_store.h)
  /// instead of `experts`; same bytes, so the same results bit for bit. Not owned.
  ExpertStore* store = nullptr;
  /// The ranks that split this layer's experts (null: one process): rank r computes the expert
  /// ids split_range(E, size, r); the others' outputs arrive by all-gather (latent_moe.h). Not owned.
  Comm* comm = nullptr;
  int layer = -1;           ///< this layer's index (the store's key; the layer of the
                            ///< expert tensor names in error messages)
  std::string name_prefix;  ///< the checkpoint's prefix of text tensor names
                            ///< ("language_model." or ""), for error messages
};

struct LayerWeights {
  LayerSpec spec;
  std::vector<float> input_norm;  ///< [D]
  std::vector<float> post_norm;   ///< [D]
  AttnResWeights attn_res;        ///< self_attention_res_* (unused at layer 0, still bound)
  AttnResWeights ffn_res;         ///< mlp_res_*
  KdaWeights kda;                 ///< valid when spec.attn == KDA
  MlaWeights mla;                 ///< valid when spec.attn == MLA
  GluMlpWeights dense;            ///< valid when spec.ffn == Dense
  MoeWeights moe;                 ///< valid when spec.ffn == LatentMoE
};

struct ModelWeights {
  ModelWeights() = default;
  ModelWeights(ModelWeights&&) = default;  // deque moves keep element addresses (views stay valid)
  ModelWeights& operator=(ModelWeights&&) = default;
  const TensorView* embed = nullptr;    ///< BF16 [V, D]
  const TensorView* lm_head = nullptr;  ///< BF16 [V, D] (untied), or this rank's rows of it
  bool lm_head_tied = false;            ///< tie_word_embeddings: lm_head is the embedding table
  std::vector<float> final_norm;        ///< [D] model.norm
  AttnResWeights out_res;               ///< output_attn_res_*
  std::vector<LayerWeights> layers;     ///< [num_hidden_layers]
  std::deque<QuantMatrix> trunk_quant;  ///< encodings owned by quantize_trunk
  std::deque<TensorView> trunk_views;   ///< their views (quant set), replacing the BF16 pointers
  AnonPages trunk_copy;                 ///< copy_trunk's memory (empty: the trunk is read mapped)
  std::deque<TensorView> trunk_copy_views;  ///< views into trunk_copy, replacing the mapped pointers
};

/// Binds every text tensor the forward pass reads, each looked up through the tensor table.
/// Tied embeddings (no lm_head row): lm_head == embed. Routed experts bind as MXFP4 only: a
/// checkpoint holding a plain "<expert>.weight" (valid for Checkpoint::open and `k3 info`) is
/// refused here, naming the tensor. Other errors (k3::Error): unsupported config options
/// (use_full_rank_gate false, mla_use_nope false, a router activation other than sigmoid), a
/// tensor the table's rule refuses (expected vs found dtype and shape).
ModelWeights bind_weights(const Checkpoint& ck);

/// Trunk quantization at load: re-encodes every BF16 trunk matrix the fast path reads
/// through k3::matmul — KDA/MLA projections (except MLA kv_b, read per head as raw BF16), dense
/// and shared-expert MLPs, the LatentMoE down/up projections, lm_head — to `kind`
/// (kernels/q8q4_trunk.h), in parallel, and points the weights at the quantized views. Kept in
/// BF16: the embedding (row lookups), the routers (expert selection), kv_b, matrices whose
/// column count is not a multiple of 32; routed experts stay MXFP4. Returns the bytes of the
/// encodings. Errors: those of quantize_matrix (NaN/Inf in a weight, naming it).
/// `progress` (may be empty) is called with ("trunk quantization", matrices done, matrices), one
/// call at a time: 0 first, then after each matrix.
uint64_t quantize_trunk(ModelWeights& w, QuantKind kind, const ProgressFn& progress = {});

/// What copy_trunk did.
struct TrunkCopyStats {
  int64_t matrices = 0;      ///< matrices copied
  uint64_t bytes = 0;        ///< bytes copied (Σ nbytes)
  uint64_t huge_bytes = 0;   ///< of the copy's memory, bytes in 2 MiB pages after copying (AnonPages::huge_bytes)
  uint64_t paged_out = 0;    ///< mapped bytes advised out of the page cache (core/anon_pages.h page_out)
  double seconds = 0;        ///< wall time of the copy and the advice
  std::span<const uint8_t> memory;  ///< the copy's bytes (ModelWeights::trunk_copy), for the read probe
};

/// `--trunk-memory copy` (io/memory_plan.h TrunkMemory): copies every matrix the forward pass
/// streams from the mapping — lm_head, the KDA/MLA projections (kv_b included), the routers, the
/// LatentMoE down/up projections, dense and shared-expert MLPs; not the embedding table (one row
/// per token) nor the routed experts (MXFP4, mapped or streamed) nor matrices quantize_trunk
/// replaced (already in RAM) — into one AnonPages region in 2 MiB pages (each matrix 64-byte
/// aligned, in parallel), points the weights at the copies (same shapes, dtypes and bytes: results
/// are bit-identical), then, when `drop_mapped`, advises the mapped bytes out of the page cache
/// (page_out; skipped for a tied lm_head, whose bytes the embedding still reads). Call at most
/// once, before anything keeps a pointer to the mapped matrices (MLA kv_b halves). `progress`
/// (may be empty): ("trunk copy", matrices done, matrices). Errors: k3::Error when `w` was
/// copied already or the memory cannot be mapped (naming --trunk-memory).
TrunkCopyStats copy_trunk(ModelWeights& w, bool drop_mapped = true, const ProgressFn& progress = {});

/// The bytes of the checkpoint's mapping that forward passes read through `w`, one range per
/// matrix, for page-in (core/page_in.h): the embedding, lm_head and every projection, router and
/// MLP matrix (BF16) except those quantize_trunk replaced (their encodings are in RAM and the
/// BF16 is no longer read) or copy_trunk copied (read from w.trunk_copy), and each routed expert's MXFP4 packed (U8 [rows, cols/2]) and scale
/// (U8 [rows, cols/32]) bytes unless the layer's experts are streamed (MoeWeights::store). The
/// vectors decoded to fp32 at bind time are not included (read once, then). A range may repeat
/// (tied embeddings: lm_head == embed) and is not page-aligned. `experts`: the expert ids
/// [begin, end) whose bytes are read (a rank's block under expert parallelism, model/k3_model.h
/// ModelShard; the others' are never touched); an empty range (end == 0): every expert.
std::vector<std::span<const uint8_t>> mapped_weight_ranges(const ModelWeights& w, IndexRange experts = {});

}  // namespace k3
