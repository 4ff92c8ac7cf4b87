#include "core/page_in.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "core/error.h"

namespace k3 {
namespace {

struct Interval {
  uintptr_t begin, end;  ///< page-aligned [begin, end)
};

std::string hex(uintptr_t a) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(a));
  return b;
}

std::string where(uintptr_t b, uintptr_t e) { return "page-in: bytes [" + hex(b) + ", " + hex(e) + ")"; }

// false once MADV_POPULATE_READ has been refused with EINVAL (a kernel before 5.14).
std::atomic<bool> g_populate{true};

// Reads the pages [b, e) (page-aligned, not resident): readahead of the run, then one fault call.
void read_run(uintptr_t b, uintptr_t e, uintptr_t page) {
  void* p = reinterpret_cast<void*>(b);
  const size_t n = e - b;
  madvise(p, n, MADV_WILLNEED);  // advice: an error here changes nothing the next call does not report
#ifdef MADV_POPULATE_READ
  if (g_populate.load(std::memory_order_relaxed)) {
    if (madvise(p, n, MADV_POPULATE_READ) == 0) return;
    if (errno != EINVAL) throw Error(where(b, e) + ": cannot read the pages (" + std::strerror(errno) + ")");
    g_populate.store(false, std::memory_order_relaxed);
  }
#endif
  unsigned sink = 0;
  for (uintptr_t a = b; a < e; a += page) sink += *reinterpret_cast<const volatile uint8_t*>(a);
  static std::atomic<unsigned> g_sink{0};  // keeps the reads
  g_sink.fetch_add(sink, std::memory_order_relaxed);
}

// Makes [c.begin, c.end) resident; returns the bytes that were resident before.
uint64_t page_in_chunk(const Interval& c, uintptr_t page) {
  const size_t n_pages = (c.end - c.begin) / page;
  std::vector<unsigned char> resident(n_pages);
  if (mincore(reinterpret_cast<void*>(c.begin), c.end - c.begin, resident.data()) != 0)
    throw Error(where(c.begin, c.end) + ": not a mapped range (mincore: " + std::strerror(errno) + ")");
  uint64_t n_resident = 0;
  size_t i = 0;
  while (i < n_pages) {
    if (resident[i] & 1) {
      ++n_resident;
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < n_pages && !(resident[j] & 1)) ++j;
    read_run(c.begin + i * page, c.begin + j * page, page);
    i = j;
  }
  return n_resident * page;
}

}  // namespace

PageInStats page_in(std::span<const std::span<const uint8_t>> ranges, const PageInOptions& options,
                    const ProgressFn& progress) {
  if (options.threads < 1) throw Error("page-in: threads must be >= 1, found " + std::to_string(options.threads));
  if (options.chunk_bytes == 0) throw Error("page-in: chunk_bytes must be >= 1, found 0");
  const auto t0 = std::chrono::steady_clock::now();
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));

  // The ranges widened to whole pages, sorted, overlapping or touching ones merged.
  std::vector<Interval> iv;
  for (std::span<const uint8_t> r : ranges) {
    if (r.empty()) continue;
    const uintptr_t a = reinterpret_cast<uintptr_t>(r.data());
    iv.push_back({a & ~(page - 1), (a + r.size() + page - 1) & ~(page - 1)});
  }
  std::sort(iv.begin(), iv.end(), [](const Interval& x, const Interval& y) { return x.begin < y.begin; });
  std::vector<Interval> merged;
  for (const Interval& x : iv) {
    if (!merged.empty() && x.begin <= merged.back().end) merged.back().end = std::max(merged.back().end, x.end);
    else merged.push_back(x);
  }
  // Chunks of at most chunk_bytes (whole pages) of each merged interval.
  const uint64_t chunk = std::max<uint64_t>(page, (options.chunk_bytes + page - 1) / page * page);
  std::vector<Interval> chunks;
  PageInStats st;
  for (const Interval& x : merged) {
    st.bytes += x.end - x.begin;
    for (uintptr_t b = x.begin; b < x.end; b += std::min<uint64_t>(chunk, x.end - b))
      chunks.push_back({b, b + std::min<uint64_t>(chunk, x.end - b)});
  }
  if (progress) progress(kPageInStep, 0, static_cast<int64_t>(st.bytes));

  std::atomic<size_t> next{0};
  std::mutex mu;  // guards done, resident, error and the progress calls
  uint64_t done = 0, resident = 0;
  std::string error;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < chunks.size();) {
      try {
        const uint64_t r = page_in_chunk(chunks[i], page);
        std::lock_guard<std::mutex> lock(mu);
        resident += r;
        done += chunks[i].end - chunks[i].begin;
        if (progress) progress(kPageInStep, static_cast<int64_t>(done), static_cast<int64_t>(st.bytes));
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        if (error.empty()) error = e.what();
        next.store(chunks.size());
        return;
      }
    }
  };
  const size_t n_threads = std::min<size_t>(static_cast<size_t>(options.threads), chunks.size());
  std::vector<std::thread> pool;
  try {
    for (size_t t = 1; t < n_threads; ++t) pool.emplace_back(work);
  } catch (const std::system_error&) {  // no more threads: the ones started and this one do the work
  }
  work();
  for (std::thread& t : pool) t.join();
  if (!error.empty()) throw Error(error);
  st.resident_bytes = resident;
  st.read_bytes = st.bytes - resident;
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

}  // namespace k3
