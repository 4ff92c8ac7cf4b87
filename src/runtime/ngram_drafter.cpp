#include "runtime/ngram_drafter.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace k3 {

NgramDrafter::NgramDrafter(int64_t n_max_gram, int64_t n_min_gram) : n_max_gram_(n_max_gram), n_min_gram_(n_min_gram) {
  if (n_min_gram < 1 || n_max_gram < n_min_gram || n_max_gram > 64)
    throw Error("--spec-ngram-size-n: expected 1..64 (and >= the minimum n-gram " + std::to_string(n_min_gram) +
                "), found " + std::to_string(n_max_gram));
}

Draft NgramDrafter::propose(std::span<const int32_t> ctx, int64_t n_max) {
  Draft d;
  const int64_t L = static_cast<int64_t>(ctx.size());
  for (int64_t n = std::min(n_max_gram_, L - 1); n >= n_min_gram_; --n) {
    const int32_t* suf = ctx.data() + (L - n);
    // Most recent earlier start s (s + n <= L − 1, so at least one id follows the match).
    for (int64_t s = L - n - 1; s >= 0; --s) {
      if (!std::equal(suf, suf + n, ctx.data() + s)) continue;
      const int64_t from = s + n, cnt = std::min(n_max, L - from);
      d.ids.assign(ctx.begin() + from, ctx.begin() + from + cnt);
      return d;
    }
  }
  return d;
}

}  // namespace k3
