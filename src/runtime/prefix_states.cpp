// PrefixStates: longest-proper-prefix lookup over a few saved states.
#include "runtime/prefix_states.h"

#include <algorithm>

namespace k3 {

void PrefixStates::remember(std::vector<int32_t> ids, SequenceState state) {
  entries_.push_back({std::move(ids), std::move(state)});
  while (entries_.size() > capacity_) entries_.erase(entries_.begin());
}

SequenceState PrefixStates::fork_for(const Model& model, std::span<const int32_t> prompt, std::size_t* n_reused) const {
  const Entry* best = nullptr;
  for (const Entry& e : entries_) {
    if (e.ids.empty() || e.ids.size() >= prompt.size()) continue;
    if (!std::equal(e.ids.begin(), e.ids.end(), prompt.begin())) continue;
    if (!best || e.ids.size() > best->ids.size()) best = &e;
  }
  if (n_reused) *n_reused = best ? best->ids.size() : 0;
  return best ? best->state : model.new_sequence();
}

}  // namespace k3
