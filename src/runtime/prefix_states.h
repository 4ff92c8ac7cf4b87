// Prompt reuse for multi-turn chat: remembers sequence states at known token prefixes, so a new
// prompt that extends one of them is prefilled only past it (KDA state is recurrent, so a state
// cannot be rewound — only resumed from a point that was saved).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "model/k3_model.h"

namespace k3 {

class PrefixStates {
 public:
  /// Keeps `state`, which must hold exactly the ids `ids` (older entries beyond `capacity`, the
  /// oldest first, are dropped). capacity >= 1.
  explicit PrefixStates(std::size_t capacity = 2) : capacity_(capacity < 1 ? 1 : capacity) {}
  void remember(std::vector<int32_t> ids, SequenceState state);

  /// For a new prompt: the longest remembered entry whose ids are a proper prefix of `prompt`
  /// (at least one new id must remain, whose logits the caller needs). Returns a copy of its
  /// state and sets *n_reused to its length; with no match returns model.new_sequence() and 0.
  SequenceState fork_for(const Model& model, std::span<const int32_t> prompt, std::size_t* n_reused) const;

  void clear() { entries_.clear(); }
  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::vector<int32_t> ids;
    SequenceState state;
  };
  std::size_t capacity_;
  std::vector<Entry> entries_;
};

}  // namespace k3
