// Gated MLA with NoPE, spec k3-architecture.md §3.3.
// q = W_qb · RMSNorm(W_qa x) → per head [q_nope (dn), q_r (dr)];
// ckv = W_kva x → c = RMSNorm(ckv[0:kvr]) (the latent), k_r = ckv[kvr:kvr+dr] (raw, shared by all
// heads, never rotated); per head k_nope = W_kb,h c, v = W_vb,h c;
// score = (q_nope·k_nope + q_r·k_r) / sqrt(dn + dr), causal softmax in fp32; o = Σ p v;
// o ⊙= σ(W_g x); out = W_o o.
// The per-token cache holds only [c (kvr), k_r (dr)].
#pragma once
#include <span>

#include "model/seq_rows.h"
#include <cstdint>
#include <vector>

#include "io/config.h"
#include "kernels/mla_attend.h"
#include "model/exec.h"
#include "model/weights.h"

namespace k3 {

/// Every MLA dimension, from the config.
struct MlaDims {
  int64_t D = 0, H = 0;             ///< hidden size, heads
  int64_t q_rank = 0, kv_rank = 0;  ///< q_lora_rank, kv_lora_rank
  int64_t dn = 0, dr = 0, dv = 0;   ///< qk_nope_head_dim, qk_rope_head_dim (unrotated), v_head_dim
  float norm_eps = 1e-6f;           ///< q_a/kv_a layernorm eps (mla_norm_eps)
  bool output_gate = true;          ///< mla_use_output_gate
  int64_t row() const { return kv_rank + dr; }  ///< cache floats per token
  static MlaDims from(const ModelConfig& c);
};

/// Latent cache of one MLA layer for one sequence: [n_tokens, kv_rank + dr] rows, per row the
/// normalized latent c followed by the raw extra key dims k_r, stored as `type`
/// (kernels/mla_attend.h MlaCacheType: F32 in `rows`, BF16/FP8 encoded rows of
/// mla_cache_row_bytes() bytes in `enc`; the other vector stays empty). An empty cache takes the
/// type of the forward that first appends to it (ExecOptions::mla_cache). Grows without a cap.
struct MlaCache {
  MlaCacheType type = MlaCacheType::F32;
  std::vector<float> rows;   ///< F32 rows
  std::vector<uint8_t> enc;  ///< BF16 / FP8 rows
  int64_t row_bytes(const MlaDims& d) const { return mla_cache_row_bytes(type, d.kv_rank, d.dr); }
  int64_t n_tokens(const MlaDims& d) const {
    return type == MlaCacheType::F32 ? static_cast<int64_t>(rows.size()) / d.row()
                                     : static_cast<int64_t>(enc.size()) / row_bytes(d);
  }
  uint64_t bytes() const { return rows.size() * sizeof(float) + enc.size(); }
  bool empty() const { return rows.empty() && enc.empty(); }
  /// The rows as the attention ops read them.
  MlaRows view() const {
    return MlaRows{type == MlaCacheType::F32 ? reinterpret_cast<const uint8_t*>(rows.data()) : enc.data(), type};
  }
  /// Keeps the first n rows.
  void truncate(const MlaDims& d, int64_t n) {
    if (type == MlaCacheType::F32) rows.resize(static_cast<size_t>(n * d.row()));
    else enc.resize(static_cast<size_t>(n * row_bytes(d)));
  }
  /// Room for n rows.
  void reserve(const MlaDims& d, int64_t n) {
    if (type == MlaCacheType::F32) rows.reserve(static_cast<size_t>(n * d.row()));
    else enc.reserve(static_cast<size_t>(n * row_bytes(d)));
  }
  void shrink_to_fit() {
    rows.shrink_to_fit();
    enc.shrink_to_fit();
  }
};

/// How attention over the cache is evaluated; both are exact forms of the same math.
enum class MlaMode {
  Auto,      ///< Absorbed for a single token (decode), Expanded for several (prefill)
  Expanded,  ///< k_nope, v per head expanded tile by tile (flash attention, kernels/mla_attend.h)
  Absorbed,  ///< q_abs = W_kbᵀ q_nope; scores and context in latent space; o = W_vb ctx (spec §3.3)
};

/// kv_b split into its k_nope and v halves (kernels/mla_attend.h: views, no copy), done once per
/// layer when the model is built. Errors: k3::Error naming the tensor when kv_b is not BF16
/// [H·(dn + dv), kv_rank] with data.
MlaKvbHalves mla_split_kv_b(const MlaWeights& w, const MlaDims& dims);

/// The head sizes of the attention ops (kernels/mla_attend.h).
MlaAttnShape mla_attn_shape(const MlaDims& dims);

/// Forward of one MLA layer over T consecutive tokens of one sequence.
/// x: [T, D] fp32, already normalized by input_layernorm; out: [T, D] (must not alias x).
/// Appends T rows to `cache`; token t attends to every cached position up to and including itself.
/// With w.o_proj null, out receives the (gated) head outputs before o_proj, [T, H·dv] (a rank's
/// heads under the head split, model/k3_model.cpp: dims.H its heads, w's q_b/kv_b/g_proj its
/// rows); H may be 0 (the cache still advances, out is empty).
/// ex.fast: projections through k3::matmul, attention by the ops of kernels/mla_attend.h
/// (mla_attend_expanded / mla_attend_absorbed on `kv_b`, the halves from mla_split_kv_b; null:
/// split here). Otherwise the k3::ref oracle (fp64 dots). Throws k3::Error on a malformed cache.
void mla_forward(const MlaWeights& w, const MlaDims& dims, const float* x, int64_t T, MlaCache& cache, float* out,
                 MlaMode mode = MlaMode::Auto, const ExecOptions& ex = {}, const MlaKvbHalves* kv_b = nullptr);

/// mla_forward over a batch of sequences (mla_forward is the batch of one): x and out are
/// [T_total, D] blocks whose rows segs[s] belong to sequence s, appended to caches[s]. The
/// projections run once over all rows, the attention per sequence over its own cache (Auto
/// decides per sequence). Outputs and caches are bit-identical to mla_forward on each sequence
/// alone (tests/model/test_batch.cpp). Errors: k3::Error when segs and caches differ in count,
/// segs do not tile [0, T_total) in order, or a cache is malformed (nothing is appended then).
void mla_forward_batch(const MlaWeights& w, const MlaDims& dims, const float* x, std::span<const SeqRows> segs,
                       std::span<MlaCache* const> caches, float* out, MlaMode mode = MlaMode::Auto,
                       const ExecOptions& ex = {}, const MlaKvbHalves* kv_b = nullptr);

}  // namespace k3
