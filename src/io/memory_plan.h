// Memory plan: what goes where in RAM for a K3 checkpoint on a machine of a given
// size — the trunk at its type, the per-sequence states for -c and -np, the prefix cache, the
// streamed experts' transient buffers and cache — and the expected decode speed from measured
// bandwidths. `k3 info DIR --plan --ram-gb N [--ranks R]` prints it (one rank's share under R
// ranks: rank_share); run / chat / serve refuse to start when it does not fit.
//
// Units: bytes; GB = 1e9 bytes; bandwidths in GB/s.
//
// Arithmetic (each term is printed):
//   trunk     = F32 bytes + BF16 embedding + the other BF16 matrices at the trunk type:
//               bf16 x1, q8 x(1 + 4/32)/2 (int8 + one fp32 scale per 32), q4 x(0.5 + 4/32)/2
//   states    = n_parallel x (KDA state + n_ctx x MLA cache bytes per token)   (model_summary.h)
//   transient = streamed: 3·G experts — 2·G pinned by a prefill chunk (G = max(2·top_k, 32),
//               model/latent_moe.cpp) and G by the next layer's prediction (ExpertStore::
//               prefetch) — plus the store's 16 reusable buffers; mapped: 0
//   reserve   = max(2 GB, 3% of RAM): OS, page tables, activations, logits
//   experts   = streamed: the cache (given, or everything left: min(left, all experts));
//               mapped: all routed experts must be resident
//   fits      = trunk + states + prefix cache + transient + reserve + cache (or all experts) <= RAM
// Decode speed, per token: the trunk's matrices (not the embedding table) are read from RAM; of
// the top_k x n_moe experts a fraction h (the hit rate) from RAM and 1 - h from the drive.
// Expected hit rate under uniform, independent routing with an LRU cache holding a fraction f of
// the experts: h = f (real routing is skewed, so this is a floor, not a promise). Time per token:
// serial = RAM bytes / RAM GB/s + drive bytes / drive GB/s (no overlap); overlapped = the larger
// of the two terms (reads fully hidden behind compute), the bound the streaming aims at.
// prefetch (next-layer prediction right for a share p of the experts): the predicted reads overlap
// the trunk, the 1 - p mispredicted experts are read after the router (their read time adds to
// the compute) and as many wasted reads occupy the drive:
//   t = max(t_ram + (1 - p)·t_drive, (2 - p)·t_drive)   (p = 1: overlapped; p = 0: >= serial)
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mla_cache_type.h"
#include "io/checkpoint.h"
#include "io/config.h"

namespace k3 {

/// Type of the trunk (every BF16 matrix except the routed experts and the embedding table).
enum class TrunkType { BF16, Q8, Q4 };
/// "bf16" / "q8" / "q4".
std::string_view trunk_type_name(TrunkType t);
/// Parses "bf16" | "q8" | "q4"; std::nullopt otherwise.
std::optional<TrunkType> trunk_type_from_name(std::string_view s);
/// Bytes of a BF16 matrix of `bf16_bytes` once stored at `t` (group of 32 with an fp32 scale).
uint64_t trunk_matrix_bytes(uint64_t bf16_bytes, TrunkType t);

/// Where the trunk's BF16 matrices live while the model runs (`--trunk-memory`):
///   Map:  read through the checkpoint's read-only mapping (page-cache pages, shared with every
///         process mapping the files; mostly 4 KiB page-table entries);
///   Copy: copied at load into anonymous memory in 2 MiB transparent huge pages
///         (core/anon_pages.h; model/weights.h copy_trunk), the page cache's copy of those bytes
///         then dropped (madvise MADV_PAGEOUT), so RAM holds them once either way.
/// The embedding table (read one row per token) and the routed experts stay mapped; matrices
/// quantized at load (`--trunk-type q8|q4`) are in anonymous memory already. Same bits either way.
enum class TrunkMemory { Map, Copy };
/// "map" / "copy".
std::string_view trunk_memory_name(TrunkMemory m);
/// Parses "map" | "copy"; std::nullopt otherwise.
std::optional<TrunkMemory> trunk_memory_from_name(std::string_view s);

/// Text-weight bytes of a checkpoint, split the way the plan needs them.
struct WeightBytes {
  uint64_t embedding = 0;  ///< BF16 embedding table (TensorRole::EmbedTokens)
  uint64_t bf16 = 0;       ///< every other BF16 tensor (the quantizable trunk)
  uint64_t f32 = 0;        ///< F32 tensors (small vectors, kept as they are)
  uint64_t experts = 0;    ///< U8 routed experts (MXFP4 packed + scales)
};
/// From (name, dtype, bytes) of each text tensor (name with or without the "language_model."
/// prefix; the embedding is the tensor table's EmbedTokens name); vision tensors must not be passed.
struct TensorBytes {
  std::string_view name;
  DType dtype;
  uint64_t nbytes;
};
WeightBytes weight_bytes(const std::vector<TensorBytes>& tensors);
/// From an opened checkpoint's text tensors (headers only; works without map_data).
WeightBytes weight_bytes(const Checkpoint& ck);
/// Of a complete published checkpoint of config `c`, from the tensor table alone (no shards:
/// each tensor in its published dtype and unpadded shape; K3's A_log is stored padded to 128,
/// 8,832 F32 bytes more in all).
WeightBytes weight_bytes(const ModelConfig& c);

struct PlanRequest {
  uint64_t ram_bytes = 0;  ///< machine RAM
  TrunkType trunk = TrunkType::BF16;
  TrunkMemory trunk_memory = TrunkMemory::Map;  ///< where the trunk lives (same bytes either way)
  bool stream_experts = true;                  ///< false: experts mapped (all must be resident)
  std::optional<uint64_t> expert_cache_bytes;  ///< unset: everything left after the rest
  int64_t n_ctx = 4096;                        ///< -c
  MlaCacheType mla_cache = MlaCacheType::F32;  ///< --cache-type: bytes of an MLA cache row
  int64_t n_parallel = 1;                      ///< -np
  uint64_t prefix_cache_bytes = 0;
  double ram_gbs = 0;    ///< RAM read bandwidth (0 = unknown: no speed estimate)
  double drive_gbs = 0;  ///< drive read bandwidth for expert-sized reads (0 = unknown)
  /// Next-layer prefetch (ExpertStore::prefetch): the share p of a layer's experts that the
  /// prediction named (measured: `experts streamed` line of k3 run, bench/expert_stream's
  /// "prediction"); 0 = no prefetch estimate.
  double prediction_right = 0;
  /// Ranks of a tensor + expert parallel group (docs/distributed.md; `k3 info --plan --ranks N`):
  /// the plan is then one rank's, the one with the largest share (rank 0: split_range gives the
  /// first ranks one more), on a machine of ram_bytes. Must be >= 1.
  int ranks = 1;
};

/// One rank's share of the weights and the state under `ranks` ranks (docs/distributed.md, "What
/// each rank holds"), for rank 0 (the largest share), from the config's dimensions:
///   split BF16 = KDA q/k/v/g_proj, f_b, b_proj, o_proj + MLA q_b, kv_b, g_proj, o_proj + dense and
///                shared-expert gate/up/down + lm_head (untied), each scaled by its rank-0 block
///                (heads ceil-split, intermediate columns and hidden rows in 16-row units,
///                vocabulary rows); the other BF16 bytes, the F32 vectors and the embedding stay;
///   experts    = one expert's bytes x rank 0's expert block x MoE layers;
///   KDA state  = kda_total x rank 0's heads / heads (the MLA cache is replicated).
struct RankShare {
  WeightBytes weights;           ///< the rank's bytes (bf16, experts scaled; embedding and f32 whole)
  uint64_t split_bf16 = 0;       ///< of the whole model: the BF16 bytes the ranks split
  uint64_t split_bf16_rank = 0;  ///< of those, the rank's
  uint64_t kda_state = 0;        ///< KDA state per sequence on the rank
  int64_t experts = 0;           ///< routed experts per MoE layer on the rank
};
/// Errors: k3::Error when ranks < 1 (naming --ranks).
RankShare rank_share(const ModelConfig& c, const WeightBytes& w, int ranks);

struct MemoryPlan {
  PlanRequest req;
  uint64_t trunk = 0, states = 0, state_per_seq = 0, prefix_cache = 0, transient = 0, reserve = 0;
  uint64_t expert_cache = 0;   ///< streamed: the cache; mapped: all experts
  uint64_t experts_total = 0;  ///< all routed experts
  uint64_t expert_bytes = 0;   ///< one expert
  RankShare share;             ///< the rank's share (req.ranks > 1; else the whole model)
  uint64_t total = 0;          ///< sum of the above that must be resident
  bool fits = false;
  std::string refusal;  ///< when !fits: the numbers and a suggestion
  double hit_rate = 0;  ///< expected (uniform routing, see above)
  double expert_bytes_per_token = 0, drive_bytes_per_token = 0, ram_bytes_per_token = 0;
  double tokens_per_s_serial = 0, tokens_per_s_overlapped = 0;  ///< 0 when a bandwidth is unknown
  double tokens_per_s_prefetch = 0;  ///< with prediction_right > 0 (see above); else 0
  /// Multi-line human report (what goes where, the arithmetic, the speed, the verdict).
  std::string format() const;
};

/// Computes the plan (one rank's when r.ranks > 1: rank_share). Errors: k3::Error when
/// ram_bytes == 0, n_ctx < 0, n_parallel < 1 or ranks < 1 (naming --ram-gb / -c / -np /
/// --ranks), or the state size overflows.
MemoryPlan make_memory_plan(const ModelConfig& c, const WeightBytes& w, const PlanRequest& r);

}  // namespace k3
