// SequenceState internals (the state module, the model's layer loop and the KDA/MLA sublayers
// only; the runtime uses model/sequence_state.h): what one sequence carries between forward calls.
//   per KDA layer: recurrent state S [H, d_k, d_v] fp32 (key-major) + short-conv window
//                  [3, K−1, C] fp32 (model/kda.h)
//   per MLA layer: latent cache [n_tokens, kv_lora_rank + qk_rope_head_dim] fp32, bf16 or fp8
//                  (model/mla.h; --cache-type)
// AttnRes has no cross-token state (spec §3.1). A copy of the state is an independent fork at the
// same position; save()/load() round-trip it bit-exactly through a self-describing file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/config.h"
#include "model/sequence_state.h"
#include "model/kda.h"
#include "model/mla.h"

namespace k3 {

struct LayerState {
  AttnKind kind = AttnKind::KDA;
  KdaDims kda_dims;  ///< when kind == KDA
  KdaState kda;      ///< when kind == KDA
  MlaDims mla_dims;  ///< when kind == MLA
  MlaCache mla;      ///< when kind == MLA
};

struct SequenceState::Impl {
  int64_t n_past = 0;
  /// The head split this state was laid out for (model/k3_model.h ModelShard): its KDA layers
  /// hold the heads split_range(H, ranks, rank) of every layer; one process: 0 of 1.
  int rank = 0, ranks = 1;
  /// snapshot_floats() of the same state in one process (every rank's heads), set by fresh().
  int64_t group_snapshot_floats = 0;
  bool failed = false;             ///< a forward threw mid-pass: the state is inconsistent and refused
  std::vector<LayerState> layers;  ///< [num_hidden_layers]

  /// A fresh (empty) state laid out for `cfg`, its KDA layers holding rank `rank` of `ranks`'s
  /// heads (split_range; one process: all).
  /// Its MLA caches store rows as `mla_cache` (model/mla.h MlaCache).
  static Impl fresh(const ModelConfig& cfg, int rank = 0, int ranks = 1, MlaCacheType mla_cache = MlaCacheType::F32);
  /// Throws k3::Error unless this state's layout matches `cfg` and it was laid out for rank
  /// `rank` of `ranks` (`what` names the state's origin).
  void check_matches(const ModelConfig& cfg, const std::string& what, int rank = 0, int ranks = 1) const;
};

/// SequenceState::load for rank `rank` of `ranks` (a file its save() wrote under the same split;
/// one process: 0 of 1). Errors: those of load, and a file of another split (naming both).
SequenceState load_sequence_state(const std::filesystem::path& file, const ModelConfig& cfg, int rank, int ranks,
                                  SequenceFileMeta* meta, const std::string& expect_fingerprint);

/// The internals of `s`. Errors: k3::Error for a moved-from state.
SequenceState::Impl& state_impl(SequenceState& s);
const SequenceState::Impl& state_impl(const SequenceState& s);

}  // namespace k3
