// k3::Model — the K3 forward pass (spec k3-architecture.md §3) over a mapped Checkpoint, and
// k3::SequenceState — everything one sequence carries between calls (KDA recurrent + conv state
// per KDA layer, MLA latent cache per MLA layer). Owned by the forward-pass work; this header
// fixes the public API the runtime and CLI are written against.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "io/checkpoint.h"

namespace k3 {

class DumpSink;  // named-intermediate recorder (model/dump.h)

/// Per-sequence state. Copyable (copy = fork the sequence at its current position).
/// save()/load() write/read a self-describing binary file; load() checks it matches the model.
class SequenceState {
 public:
  int64_t n_past() const;                 ///< tokens consumed so far
  uint64_t bytes() const;                 ///< bytes held (KDA state + conv + MLA cache)
  void save(const std::filesystem::path& file) const;
  static SequenceState load(const std::filesystem::path& file, const struct ModelConfig& cfg);
  // implementation-defined members live in model/sequence_state.h
  struct Impl;
  std::shared_ptr<Impl> impl;             ///< deep-copied on copy (see copy ctor)
  SequenceState();
  SequenceState(const SequenceState&);
  SequenceState& operator=(const SequenceState&);
  SequenceState(SequenceState&&) noexcept;
  SequenceState& operator=(SequenceState&&) noexcept;
  ~SequenceState();
};

class Model {
 public:
  /// Binds (never copies) the checkpoint's weights; the checkpoint must outlive the model.
  explicit Model(const Checkpoint& ck);
  ~Model();
  const ModelConfig& config() const;
  SequenceState new_sequence() const;
  /// Appends `tokens` (ids in [0, vocab)) to `seq` and returns logits, fp32 row-major:
  /// [tokens.size(), vocab] when all_logits, else [1, vocab] for the last token.
  /// Throws k3::Error on an out-of-range id or an empty `tokens`.
  std::vector<float> forward(SequenceState& seq, std::span<const int32_t> tokens,
                             bool all_logits, DumpSink* dump = nullptr) const;
 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace k3
