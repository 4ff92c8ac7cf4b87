// k3::SequenceState — everything one sequence carries between forward calls — and k3::StateLog,
// the KDA states of one sequence at a run of positions (rollback points).
//
// The layout (per KDA layer the recurrent state S and the short-conv window; per MLA layer the
// latent rows) is private to the state module (model/sequence_state_impl.h) and the sublayers
// that compute it (model/kda.*, model/mla.*); the runtime reaches it only through this API:
//   n_past / bytes / fork                       position, memory, an independent copy;
//   reserve / release_unused                    MLA row capacity (pages untouched until written);
//   snapshot / rollback_to (with a StateLog)    the one rollback mechanism;
//   copy_mla_rows / append_mla_rows             MLA rows by token range (prefix-cache blocks);
//   mark_failed / failed                        a state left inconsistent is refused;
//   save / load                                 a state file (model/state_file.h container);
//   state_difference                            the first field where two states differ.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/mla_attend.h"

namespace k3 {

struct ModelConfig;

/// What a sequence-state file carries besides the state (format version 2).
struct SequenceFileMeta {
  std::string fingerprint;   ///< model_fingerprint() of the model that computed the state
  std::vector<int32_t> ids;  ///< the ids the state holds ([n_past]), or empty when not recorded
  std::string extra_json;    ///< caller's JSON object text (e.g. a chat's messages), or empty
};

/// The KDA state of one sequence at `points()` consecutive positions: point i is the state
/// after n_past = first() + i tokens. Floats, fp32, laid out [n_kda_layers, points, record]
/// with record = S [H, d_k, d_v] then conv window [3, K−1, C] of that layer (KDA layers in layer
/// order). Two producers: a decode-form forward (BatchEntry::kda_steps: one point per token of
/// the window) and SequenceState::snapshot() (one point, at n_past()). One consumer:
/// SequenceState::rollback_to(). Copyable; clear() keeps the capacity for the next window.
class StateLog {
 public:
  StateLog() = default;
  /// A log read back from storage (e.g. a prefix-cache block): `floats` laid out as above.
  /// rollback_to() checks its size against the state's layout.
  StateLog(int64_t first, int64_t points, std::vector<float> floats)
      : data_(std::move(floats)), first_(first), points_(points) {}

  int64_t first() const { return first_; }    ///< n_past of point 0
  int64_t points() const { return points_; }  ///< positions held
  bool empty() const { return points_ == 0; }
  /// The floats, [n_kda_layers, points, record] fp32 (see the class comment).
  std::span<const float> floats() const { return data_; }
  /// Bytes allocated (capacity), for memory accounting.
  uint64_t bytes() const { return data_.capacity() * sizeof(float); }
  /// Empties the log (keeps its capacity).
  void clear() {
    data_.clear();
    first_ = points_ = 0;
  }

  /// Writers (the model's decode-form forward): begin() empties the log for `points` positions
  /// starting at n_past `first`; each KDA layer then append()s its records in token order.
  void begin(int64_t first, int64_t points) {
    data_.clear();
    first_ = first;
    points_ = points;
  }
  void append(std::span<const float> f) { data_.insert(data_.end(), f.begin(), f.end()); }

 private:
  std::vector<float> data_;
  int64_t first_ = 0, points_ = 0;
};

/// Per-sequence state. Copyable (copy = fork the sequence at its current position).
/// save()/load() write/read a self-describing binary file; load() checks it matches the model.
class SequenceState {
 public:
  /// An empty state laid out for no model (Model::new_sequence() makes a usable one).
  SequenceState();
  SequenceState(const SequenceState&);
  SequenceState& operator=(const SequenceState&);
  SequenceState(SequenceState&&) noexcept;
  SequenceState& operator=(SequenceState&&) noexcept;
  ~SequenceState();

  int64_t n_past() const;  ///< tokens consumed so far
  uint64_t bytes() const;  ///< bytes held (KDA state + conv + MLA cache)
  /// An independent copy at the same position (same as the copy constructor).
  SequenceState fork() const { return *this; }

  /// Reserves room for `n_tokens` MLA rows per MLA layer (so that no row copy happens while
  /// they are appended); pages are touched only as rows are written. No effect when smaller
  /// than what is held. Errors: k3::Error for n_tokens < 0.
  void reserve(int64_t n_tokens);
  /// Frees the MLA row capacity beyond the rows held.
  void release_unused();

  /// Marks the state inconsistent (a forward failed mid-way, or it holds unverified drafts):
  /// forward() and save() then refuse it.
  void mark_failed();
  bool failed() const;

  /// Floats of one point of a StateLog of this state (Σ over KDA layers of S + conv).
  int64_t snapshot_floats() const;
  /// snapshot_floats() of this state in one process: the sum over every rank's heads, the same
  /// number on every rank of a group (budgets that must decide alike on all ranks count this).
  int64_t group_snapshot_floats() const;
  /// The KDA state now, as a StateLog of one point at n_past().
  StateLog snapshot() const;
  /// Rolls the state back to position `n_past`, a point of `log` (first() <= n_past <=
  /// first() + points() − 1) no later than n_past(): every KDA layer gets the log's state at
  /// that point, every MLA cache is cut to n_past rows, n_past() = n_past. The log is a
  /// snapshot() of this sequence or the kda_steps of its last decode-form forward; the result
  /// is bit-identical to a state fed only the first n_past tokens (in the form they were fed).
  /// Errors (k3::Error, state unchanged): n_past outside the log or past
  /// n_past(), a log whose size is not points() · snapshot_floats().
  void rollback_to(const StateLog& log, int64_t n_past);

  /// Floats of one token's MLA rows over all MLA layers (Σ kv_lora_rank + qk_rope_head_dim).
  int64_t mla_token_floats() const;
  /// How this state's MLA caches store their rows (F32 when it has no MLA layer).
  MlaCacheType mla_cache_type() const;
  /// Appends to `out` the MLA rows of tokens [begin, end), [n_mla_layers, end − begin, row]
  /// fp32 (MLA layers in layer order). Errors: k3::Error unless 0 <= begin <= end <= n_past(),
  /// or when the caches are not F32 (the prefix cache stores f32 rows; the error names
  /// --cache-type).
  void copy_mla_rows(int64_t begin, int64_t end, std::vector<float>& out) const;
  /// Appends `n_tokens` tokens of MLA rows laid out as copy_mla_rows() writes them and advances
  /// n_past() by n_tokens. The KDA state is not touched: the caller then sets it for the new
  /// position (rollback_to a snapshot taken there). Errors: k3::Error (state unchanged) when
  /// rows.size() != n_tokens · mla_token_floats() or n_tokens < 0, or the caches are not F32.
  void append_mla_rows(std::span<const float> rows, int64_t n_tokens);

  /// Writes the state (file "K3SEQST1", version 2: JSON header with `meta`, fp32 payload,
  /// CRC-32; the container of model/state_file.h) atomically: a fresh temporary file in file's
  /// directory renamed onto `file` (a symlink there is replaced, not followed;
  /// core/atomic_file.h). Errors: k3::Error naming the file (cannot write, ids.size() != n_past,
  /// a failed state).
  void save(const std::filesystem::path& file, const SequenceFileMeta& meta = {}) const;
  /// Reads a state written by save(). With `expect_fingerprint` non-empty, a state of another
  /// model (or numeric path) is refused. Errors (k3::Error naming the file, what was expected and
  /// found): missing, bad magic (another k3 file kind is named), older version, malformed header
  /// (model/state_header.h; a header nested deeper than kMaxJsonDepth names the key, e.g.
  /// "extra"; so save() refuses meta.extra_json nested deeper than kMaxJsonDepth - 1), layout of
  /// another model, fingerprint mismatch, truncated, CRC mismatch.
  static SequenceState load(const std::filesystem::path& file, const ModelConfig& cfg, SequenceFileMeta* meta = nullptr,
                            const std::string& expect_fingerprint = {});

  /// The first difference between `a` and `b`, bit for bit ("" when identical): n_past, layer
  /// count, or "layer <il> <KDA S|KDA conv|MLA rows>: <size or element i: bits vs bits>".
  friend std::string state_difference(const SequenceState& a, const SequenceState& b);

  struct Impl;  ///< model/sequence_state_impl.h (the state module and the model only)

 private:
  friend Impl& state_impl(SequenceState& s);
  friend const Impl& state_impl(const SequenceState& s);
  std::shared_ptr<Impl> impl_;  ///< deep-copied on copy
};

std::string state_difference(const SequenceState& a, const SequenceState& b);

}  // namespace k3
