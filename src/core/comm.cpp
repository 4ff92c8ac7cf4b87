// The size-1 communicator, argument checks and the contiguous block split: see comm.h.
#include "core/comm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace k3 {

int64_t Comm::account_allgatherv(std::span<const int64_t> counts) {
  const int n = size(), me = rank();
  if (static_cast<int64_t>(counts.size()) != n)
    throw Error("rank " + std::to_string(me) + ": allgatherv: " + std::to_string(counts.size()) +
                " piece sizes for a group of " + std::to_string(n) + " ranks");
  int64_t total = 0;
  for (int r = 0; r < n; ++r) {
    if (counts[r] < 0)
      throw Error("rank " + std::to_string(me) + ": allgatherv: piece size of rank " + std::to_string(r) +
                  " is negative (" + std::to_string(counts[r]) + ")");
    total += counts[r];
  }
  ++counters_.collectives;
  const int64_t mine = counts[me];
  counters_.bytes_sent += static_cast<uint64_t>(mine) * static_cast<uint64_t>(n - 1);
  counters_.bytes_received += static_cast<uint64_t>(total - mine);
  return total;
}

void Comm::account_broadcast(int64_t bytes, int root) {
  const int n = size(), me = rank();
  if (bytes < 0) throw Error("rank " + std::to_string(me) + ": broadcast: negative size " + std::to_string(bytes));
  if (root < 0 || root >= n)
    throw Error("rank " + std::to_string(me) + ": broadcast: root " + std::to_string(root) + " outside [0, " +
                std::to_string(n) + ")");
  ++counters_.collectives;
  if (n == 1) return;
  if (me == root) counters_.bytes_sent += static_cast<uint64_t>(bytes) * static_cast<uint64_t>(n - 1);
  else counters_.bytes_received += static_cast<uint64_t>(bytes);
}

void SingleProcessComm::allgatherv(const void* mine, std::span<const int64_t> counts, void* out) {
  const int64_t total = account_allgatherv(counts);
  if (total > 0 && mine != out) std::memmove(out, mine, static_cast<size_t>(total));
}

void SingleProcessComm::broadcast(void*, int64_t bytes, int root) { account_broadcast(bytes, root); }

void SingleProcessComm::abort(int code) { std::exit(code); }

IndexRange split_range(int64_t n, int ranks, int r) {
  if (n < 0 || ranks < 1 || r < 0 || r >= ranks)
    throw Error("split_range: " + std::to_string(n) + " items, rank " + std::to_string(r) + " of " +
                std::to_string(ranks) + " (expected n >= 0 and 0 <= rank < ranks)");
  const int64_t base = n / ranks, extra = n % ranks;
  const int64_t begin = r * base + std::min<int64_t>(r, extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

IndexRange split_range_units(int64_t n, int ranks, int r, int64_t unit) {
  if (unit < 1) throw Error("split_range_units: unit " + std::to_string(unit) + " (expected >= 1)");
  const IndexRange u = split_range((n + unit - 1) / unit, ranks, r);
  return {std::min(n, u.begin * unit), std::min(n, u.end * unit)};
}

int split_owner(int64_t n, int ranks, int64_t i) {
  const int64_t base = n / ranks, extra = n % ranks;
  const int64_t big = extra * (base + 1);  // items held by the ranks with one more
  if (i < big) return static_cast<int>(i / (base + 1));
  return static_cast<int>(extra + (i - big) / base);
}

}  // namespace k3
