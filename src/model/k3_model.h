// k3::Model — the K3 forward pass (spec k3-architecture.md §3) over a mapped Checkpoint; the
// per-sequence state it advances is k3::SequenceState (model/sequence_state.h). This header
// fixes the public API the runtime and CLI are written against.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/comm.h"
#include "io/checkpoint.h"
#include "io/expert_store.h"
#include "io/memory_plan.h"
#include "kernels/exec_config.h"
#include "kernels/ops.h"
#include "kernels/q8q4_trunk.h"
#include "model/prefill_grid.h"
#include "model/weights.h"
#include "model/sequence_state.h"

namespace k3 {

class DumpSink;  // named-intermediate recorder (model/dump.h)

/// Construction options of k3::Model.
struct ModelOptions {
  /// How the forward pass executes (kernels/exec_config.h): ISA, Fast or Reference kernels,
  /// numerics mode, MXFP4 expert path, threads. The model resolves it at construction (its
  /// options() hold the resolved values) and runs every call under it, whatever other models in
  /// the process use. Reference ignores the ISA, numerics and MXFP4 path (always fp64). Unset
  /// fields: the process default's (set_default_exec_config), else the built-in defaults.
  ExecConfig exec;
  /// Tokens per layer-major prefill piece: forward() runs a long prompt as consecutive pieces of
  /// at most this many tokens, each through all layers with the state carried, so activation
  /// memory is bounded by the piece. A multiple of 64 (the KDA chunk) keeps KDA split-exact.
  /// Must be >= 1 (k3::Error otherwise).
  int64_t prefill_chunk = 256;
  /// Routed experts streamed from the shards through this store (io/expert_store.h)
  /// instead of read through the mapping; null: the mapping. Must be built on the same
  /// checkpoint. Results are bit-identical either way.
  std::shared_ptr<ExpertStore> expert_store;
  /// Trunk quantized at load (`--trunk-type q8|q4`, model/weights.h quantize_trunk); unset: the
  /// BF16 trunk as published. Used by the Fast kernels (the Reference oracle reads the BF16).
  std::optional<QuantKind> trunk_quant;
  /// Where the trunk's matrices live (`--trunk-memory map|copy`, io/memory_plan.h TrunkMemory):
  /// Copy runs model/weights.h copy_trunk at construction (2 MiB-page anonymous memory, the page
  /// cache's copy dropped). Results are bit-identical either way.
  TrunkMemory trunk_memory = TrunkMemory::Map;
  /// How the MLA latent caches of this model's sequences store their rows (`--cache-type`,
  /// kernels/mla_attend.h MlaCacheType): F32 (exact, the default), BF16 or FP8. Sequences made
  /// by new_sequence() use it; a state holding another type is refused by forward (k3::Error).
  MlaCacheType mla_cache = MlaCacheType::F32;
  /// The group of ranks that runs this model together (core/comm.h; docs/distributed.md); null:
  /// one process. Under N ranks each rank holds the routed experts of its contiguous expert-id
  /// block, the lm_head rows of its vocabulary block, the KDA/MLA heads of its head block (and
  /// their KDA state: new_sequence() makes a state of this rank's heads) and its block of each
  /// attention o_proj's output rows (split_range); it computes the rest redundantly. The
  /// rank-local expert outputs, logits slices, head outputs and o_proj blocks are all-gathered
  /// (no float sum crosses ranks), so every rank's results are bit-identical to one process. Every rank must call forward / forward_batch with the same arguments, in the
  /// same order (they are collective calls).
  std::shared_ptr<Comm> comm;
  /// Progress of the long steps of loading (LoadedModel::open's shard headers, the trunk
  /// quantization); may be empty. Not part of the model's numerics.
  ProgressFn progress;
};

/// Which logits rows a batch entry wants back.
enum class BatchLogits {
  None,  ///< none (an inner prefill piece)
  Last,  ///< the row of the entry's last token
  All,   ///< one row per token
};

/// Input vectors given in place of embedding-table rows (the image path, shared/spec/vision.md
/// §6.2): rows [pos, pos + n) of a BatchEntry's tokens enter the first layer as `rows`, float32
/// [n, hidden_size] row-major, instead of embed[token]. The token ids at those positions are still
/// validated and still key the prefix cache's id checks; their embedding rows are never read.
struct EmbedRows {
  int64_t pos = 0;               ///< first position, relative to the entry's tokens
  int64_t n = 0;                 ///< number of rows (>= 1)
  std::span<const float> rows;   ///< [n, hidden_size] float32
};

/// One entry of a batch (llama.cpp's llama_batch, one sequence's part): append `tokens` to
/// `*seq`. The span must stay valid for the call.
struct BatchEntry {
  SequenceState* seq = nullptr;
  std::span<const int32_t> tokens;
  BatchLogits logits = BatchLogits::Last;
  /// Decode form (model/seq_rows.h): the tokens run as one-token steps inside the one forward
  /// (KDA decode-step recurrence, absorbed MLA), so logits and state are bit-identical to
  /// feeding them one at a time; what speculative verification uses. Needs tokens.size() <=
  /// prefill_chunk (k3::Error otherwise).
  bool per_token = false;
  /// With per_token: refilled with the KDA state after each token (a StateLog of
  /// tokens.size() points, the first at n_past + 1), the rollback points of speculative
  /// decoding (SequenceState::rollback_to, runtime/speculative.h).
  StateLog* kda_steps = nullptr;
  /// Rows of the input given as vectors (EmbedRows; images). Ranges must lie inside `tokens`,
  /// be ordered by pos and not overlap; rows.size() must be n·hidden_size and every value finite
  /// (k3::Error naming the entry and the range otherwise). Chunked prefill cuts them with the
  /// tokens, so the result equals a forward whose embedding rows were these vectors.
  std::span<const EmbedRows> embeds;
};

/// What this rank of a split model holds (ModelOptions::comm): its routed experts (the same
/// expert-id block in every MoE layer), its lm_head rows, its KDA and MLA heads (their
/// projection rows and KDA state) and its block of the attention output rows — split_range
/// blocks of the experts, the vocabulary, the heads and the hidden size. One process: everything.
struct ModelShard {
  int rank = 0, ranks = 1;
  IndexRange experts;      ///< expert ids [begin, end) of each MoE layer held here
  IndexRange vocab;        ///< lm_head rows [begin, end) held here
  IndexRange kda_heads;    ///< KDA heads [begin, end) computed here (their projections and state)
  IndexRange mla_heads;    ///< MLA heads [begin, end) computed here (the latent cache is replicated)
  IndexRange hidden;       ///< rows [begin, end) of every o_proj and dense down_proj computed here
  IndexRange dense_cols;   ///< dense MLP intermediate columns (gate/up rows) [begin, end) held here
  IndexRange shared_cols;  ///< shared-expert intermediate columns [begin, end) held here
  /// Weight bytes this rank reads from the checkpoint: its trunk share (the replicated text
  /// tensors and its rows of the head-split and output-split ones),
  /// its experts' packed + scale bytes, its lm_head rows (a tied head counts as the embedding).
  uint64_t trunk_bytes = 0, expert_bytes = 0, lm_head_bytes = 0;
  uint64_t weight_bytes() const { return trunk_bytes + expert_bytes + lm_head_bytes; }
};

class Model {
 public:
  /// Binds (never copies) the checkpoint's weights; the checkpoint must outlive the model.
  /// Throws k3::Error on an invalid config/weights or options (prefill_chunk < 1, an ISA this
  /// CPU lacks).
  explicit Model(const Checkpoint& ck, ModelOptions options = {});
  /// The options in effect (exec resolved: isa and mxfp4 set).
  const ModelOptions& options() const;
  /// Where this model's prefill pieces end and where a sequence resumes bit-identically
  /// (model/prefill_grid.h), from options().prefill_chunk.
  PrefillGrid prefill_grid() const { return PrefillGrid(options().prefill_chunk); }
  ~Model();
  const ModelConfig& config() const;
  /// The bytes of the checkpoint's mapping that this model's forward passes read (model/weights.h
  /// mapped_weight_ranges: routed experts excluded when streamed, other ranks' experts and
  /// lm_head rows excluded, quantized trunk matrices excluded), for page-in (core/page_in.h). Views into the mapping: valid while the checkpoint is.
  std::vector<std::span<const uint8_t>> mapped_weight_ranges() const;
  /// What the construction's trunk copy did (options().trunk_memory == Copy); all zero under Map.
  const TrunkCopyStats& trunk_copy() const;
  /// This rank's share of the weights (one process: all of them).
  const ModelShard& shard() const;
  /// The model's communicator (options().comm, or the size-1 one when none was given).
  Comm& comm() const;
  /// A fresh sequence state of this model: under N ranks it holds this rank's KDA heads only
  /// (ModelShard::kda_heads; the MLA latent cache whole).
  SequenceState new_sequence() const;
  /// SequenceState::load for this rank: reads the state file this rank's save() wrote (under N
  /// ranks each rank writes and reads its own file, state_file()). Errors: those of
  /// SequenceState::load, and a file saved by another rank or rank count (naming both).
  SequenceState load_sequence(const std::filesystem::path& file, SequenceFileMeta* meta = nullptr,
                              const std::string& expect_fingerprint = {}) const;
  /// The file this rank saves/loads its piece of a sequence state named `file` in: `file` itself
  /// in one process and on rank 0, "<file>.rank<R>of<N>" on rank R > 0 of N.
  std::filesystem::path state_file(const std::filesystem::path& file) const;
  /// Appends `tokens` (ids in [0, vocab)) to `seq` and returns logits, fp32 row-major:
  /// [tokens.size(), vocab] when all_logits, else [1, vocab] for the last token.
  /// Throws k3::Error on an out-of-range id, an empty `tokens` or a state of another model (then
  /// `seq` is unchanged). An error from corrupt weights mid-pass leaves `seq` unusable (refused
  /// by the next call). `dump`, when given, receives the named intermediates (model/dump.h); a
  /// dumped call runs as one piece (no prefill chunking) so each name appears once.
  /// The batch of one: forward_batch({{&seq, tokens, all_logits ? All : Last}}, dump)[0].
  std::vector<float> forward(SequenceState& seq, std::span<const int32_t> tokens, bool all_logits,
                             DumpSink* dump = nullptr) const;
  /// forward() with input rows given as vectors (BatchEntry::embeds).
  std::vector<float> forward(SequenceState& seq, std::span<const int32_t> tokens, std::span<const EmbedRows> embeds,
                             bool all_logits, DumpSink* dump = nullptr) const;

  /// The forward pass over a batch of sequences, the one model loop (spec §3.1): every entry's
  /// tokens are stacked into one [T_total, D] block, so each weight matrix is read once for all
  /// rows; KDA and MLA run each sequence over its own rows and state. Entries longer than
  /// prefill_chunk run as consecutive rounds of pieces (entry i's r-th piece in round r), cut
  /// as a lone forward() cuts them. Every row is computed exactly as in a lone call: logits and
  /// states are bit-identical to forward() on each entry alone, whatever else is in the batch.
  /// Returns one fp32 row-major vector per entry: [n, vocab] rows as its `logits` asks
  /// (None: empty). Errors (k3::Error, no state changed): an empty batch, an entry without a
  /// state or tokens, the same state twice, an id out of range (names the entry and position),
  /// a state of another model, a dump with more than one entry. An error mid-pass (corrupt
  /// weights) marks every state of the batch unusable.
  std::vector<std::vector<float>> forward_batch(std::span<const BatchEntry> batch, DumpSink* dump = nullptr) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace k3
