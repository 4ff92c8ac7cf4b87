// Prompt-lookup drafter (llama.cpp's "ngram-simple" / prompt lookup decoding): match the last n
// ids of the context against earlier positions of the context (prompt + output so far) and
// propose the ids that followed the most recent earlier match. No model; q is one-hot.
#pragma once
#include <cstdint>

#include "runtime/speculative.h"

namespace k3 {

class NgramDrafter : public Drafter {
 public:
  /// n_max_gram: the longest suffix tried (--spec-ngram-size-n), n_min_gram: the shortest;
  /// the longest suffix that has an earlier match wins. Throws k3::Error naming
  /// --spec-ngram-size-n unless 1 <= n_min_gram <= n_max_gram <= 64.
  NgramDrafter(int64_t n_max_gram, int64_t n_min_gram = 1);
  /// Up to n_max ids following the most recent earlier occurrence of the longest matching suffix
  /// of `context` (length n_max_gram down to n_min_gram); none when there is no match.
  /// O(context · n) per call.
  Draft propose(std::span<const int32_t> context, int64_t n_max) override;
  std::string name() const override { return "prompt lookup"; }

 private:
  int64_t n_max_gram_, n_min_gram_;
};

}  // namespace k3
