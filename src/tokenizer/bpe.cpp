// Rank-BPE: a linear-scan version (tiktoken's _byte_pair_merge) and a heap version that
// performs the same merges in the same order (global minimum by (rank, start offset)).
#include "tokenizer/bpe.h"

#include <limits>
#include <queue>

namespace k3::tok {
namespace {

constexpr int32_t kNone = std::numeric_limits<int32_t>::max();

void bpe_scan(const RankTable& ranks, std::string_view s, std::vector<int32_t>& out) {
  // parts[i] = (start offset, rank of bytes[start_i .. start_{i+2}])
  struct Part {
    uint32_t start;
    int32_t rank;
  };
  std::vector<Part> parts;
  parts.reserve(s.size() + 1);
  auto pair_rank = [&](const std::vector<Part>& p, std::size_t i) -> int32_t {
    if (i + 2 >= p.size()) return kNone;
    const int32_t r = ranks.find(s.data() + p[i].start, p[i + 2].start - p[i].start);
    return r < 0 ? kNone : r;
  };
  for (uint32_t i = 0; i <= s.size(); ++i) parts.push_back({i, kNone});
  for (std::size_t i = 0; i + 2 < parts.size(); ++i) parts[i].rank = pair_rank(parts, i);
  while (parts.size() > 2) {
    int32_t min_rank = kNone;
    std::size_t min_i = 0;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i)
      if (parts[i].rank < min_rank) {
        min_rank = parts[i].rank;
        min_i = i;
      }
    if (min_rank == kNone) break;
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(min_i) + 1);
    parts[min_i].rank = pair_rank(parts, min_i);
    if (min_i > 0) parts[min_i - 1].rank = pair_rank(parts, min_i - 1);
  }
  for (std::size_t i = 0; i + 1 < parts.size(); ++i)
    out.push_back(ranks.find(s.data() + parts[i].start, parts[i + 1].start - parts[i].start));
}

void bpe_heap(const RankTable& ranks, std::string_view s, std::vector<int32_t>& out) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  // Parts are identified by their start offset; next_[i] is the start of the following part
  // (n at the end), prev_[i] the previous part's start. alive_[i] marks current part starts.
  std::vector<uint32_t> next(n), prev(n);
  std::vector<uint8_t> alive(n, 1);
  for (uint32_t i = 0; i < n; ++i) {
    next[i] = i + 1;
    prev[i] = i == 0 ? UINT32_MAX : i - 1;
  }
  struct Cand {
    int32_t rank;
    uint32_t start;
    uint32_t end;
  };  // pair bytes [start, end)
  auto cmp = [](const Cand& a, const Cand& b) { return a.rank != b.rank ? a.rank > b.rank : a.start > b.start; };
  std::priority_queue<Cand, std::vector<Cand>, decltype(cmp)> heap(cmp);
  auto push_pair = [&](uint32_t left) {
    const uint32_t right = next[left];
    if (right >= n) return;
    const uint32_t end = next[right];
    const int32_t r = ranks.find(s.data() + left, end - left);
    if (r >= 0) heap.push({r, left, end});
  };
  for (uint32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    if (!alive[c.start]) continue;
    const uint32_t right = next[c.start];
    if (right >= n || next[right] != c.end) continue;  // stale: a side has changed
    alive[right] = 0;
    next[c.start] = c.end;
    if (c.end < n) prev[c.end] = c.start;
    if (prev[c.start] != UINT32_MAX) push_pair(prev[c.start]);
    push_pair(c.start);
  }
  for (uint32_t i = 0; i < n; i = next[i]) out.push_back(ranks.find(s.data() + i, next[i] - i));
}

}  // namespace

void bpe_encode_with(const RankTable& ranks, std::string_view piece, std::vector<int32_t>& out, bool heap) {
  if (piece.empty()) return;
  const int32_t whole = ranks.find(piece);
  if (whole >= 0) {
    out.push_back(whole);
    return;
  }
  if (heap) bpe_heap(ranks, piece, out);
  else bpe_scan(ranks, piece, out);
}

void bpe_encode(const RankTable& ranks, std::string_view piece, std::vector<int32_t>& out) {
  bpe_encode_with(ranks, piece, out, piece.size() >= kBpeHeapMin);
}

}  // namespace k3::tok
