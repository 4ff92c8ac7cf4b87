// tiktoken's rank-based byte-pair encoding of one pre-tokenizer piece (spec tokenizer.md §2.2).
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace k3::tok {

/// Appends the ids of `piece` to `out`: the piece's own rank if it is a vocabulary entry;
/// otherwise start from single bytes and repeatedly merge the adjacent pair whose
/// concatenation has the lowest rank (leftmost on ties) until no concatenation is in the
/// vocabulary. Short pieces use tiktoken's scan; long ones (>= kBpeHeapMin bytes) an equivalent
/// O(n log n) heap, so megabyte pieces stay fast. Requires all 256 single bytes in `ranks`.
void bpe_encode(const RankTable& ranks, std::string_view piece, std::vector<int32_t>& out);

/// Same result as bpe_encode, forcing one algorithm (for tests: heap == true or false).
void bpe_encode_with(const RankTable& ranks, std::string_view piece, std::vector<int32_t>& out, bool heap);

/// Piece length (bytes) from which bpe_encode switches to the heap algorithm.
inline constexpr std::size_t kBpeHeapMin = 128;

}  // namespace k3::tok
