#include "kernels/read_bandwidth.h"

#include <omp.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "core/anon_pages.h"
#include "core/error.h"
#include "kernels/dispatch.h"
#include "kernels/threads.h"

namespace k3 {

namespace {

constexpr uint64_t kChunk = 4ull << 20;  // bytes per scheduling unit (1000x a page, 1/8 of L3)

struct Usage {
  double cpu_s = 0;
  int64_t faults = 0;
};
Usage usage_now() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  Usage r;
  r.cpu_s = static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
            1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  r.faults = u.ru_minflt + u.ru_majflt;
  return r;
}

// Pins each OpenMP worker to CPU i (mod the CPUs this process may use) for its lifetime in
// scope, restoring every worker's previous mask on destruction. The pool's threads persist
// between parallel regions, so parallel_for's regions run on the pinned threads.
class PinWorkers {
 public:
  PinWorkers(bool on, int nt) : nt_(nt) {
    if (!on) return;
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    if (cpus.empty()) return;
    saved_.resize(static_cast<size_t>(nt));
#pragma omp parallel num_threads(nt)
    {
      const int i = omp_get_thread_num();
      sched_getaffinity(0, sizeof(cpu_set_t), &saved_[static_cast<size_t>(i)]);
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpus[static_cast<size_t>(i) % cpus.size()], &one);
      sched_setaffinity(0, sizeof(one), &one);
    }
    active_ = true;
  }
  ~PinWorkers() {
    if (!active_) return;
#pragma omp parallel num_threads(nt_)
    {
      const int i = omp_get_thread_num();
      if (static_cast<size_t>(i) < saved_.size())
        sched_setaffinity(0, sizeof(cpu_set_t), &saved_[static_cast<size_t>(i)]);
    }
  }
  PinWorkers(const PinWorkers&) = delete;
  PinWorkers& operator=(const PinWorkers&) = delete;
  bool active() const { return active_; }

 private:
  int nt_;
  bool active_ = false;
  std::vector<cpu_set_t> saved_;
};

struct Chunk {
  const uint64_t* p;
  int64_t words;
};

// Timed passes over `chunks` (dynamic over the workers); fills the statistics of r.
void run_passes(const std::vector<Chunk>& chunks, uint64_t bytes, int passes, bool warm_up, ReadBandwidth& r) {
  const KernelTable& kt = kernels();
  std::vector<uint64_t> part(chunks.size());
  volatile uint64_t sink = 0;
  auto pass = [&] {
    parallel_for(static_cast<int64_t>(chunks.size()), 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) part[static_cast<size_t>(i)] = kt.read_sum(chunks[i].p, chunks[i].words);
    });
    uint64_t s = 0;
    for (uint64_t v : part) s += v;
    sink = sink + s;
  };
  if (warm_up) pass();
  double wall = 0;
  const Usage u0 = usage_now();
  for (int i = 0; i < passes; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    pass();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    wall += s;
    r.run_gbs.push_back(static_cast<double>(bytes) / s / 1e9);
  }
  const Usage u1 = usage_now();
  r.bytes = bytes;
  r.threads = num_threads();
  r.timed_page_faults = u1.faults - u0.faults;
  r.cpu_share = wall > 0 ? (u1.cpu_s - u0.cpu_s) / (wall * r.threads) : 0;
  std::vector<double> v = r.run_gbs;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  r.median_gbs = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  r.best_gbs = v.back();
  r.worst_gbs = v.front();
  r.spread = r.median_gbs > 0 ? (v[(3 * (n - 1)) / 4] - v[(n - 1) / 4]) / r.median_gbs : 0;
}

std::vector<Chunk> split(std::span<const MemRegion> regions, uint64_t* total) {
  std::vector<Chunk> c;
  *total = 0;
  for (const MemRegion& m : regions) {
    // the 8-byte-aligned words of the region (a mapped tensor need not start on 8 bytes)
    const uintptr_t b = (reinterpret_cast<uintptr_t>(m.data) + 7) & ~uintptr_t{7};
    const uintptr_t e = (reinterpret_cast<uintptr_t>(m.data) + m.bytes) & ~uintptr_t{7};
    if (m.data == nullptr || e <= b) continue;
    const uint64_t words = (e - b) / 8;
    for (uint64_t o = 0; o < words; o += kChunk / 8) {
      const uint64_t n = std::min<uint64_t>(kChunk / 8, words - o);
      c.push_back({reinterpret_cast<const uint64_t*>(b) + o, static_cast<int64_t>(n)});
      *total += 8 * n;
    }
  }
  return c;
}

}  // namespace

ReadBandwidth measure_read_bandwidth(const ReadProbeOptions& o) {
  if (o.passes < 1) throw Error("read-bandwidth probe: passes must be >= 1, got " + std::to_string(o.passes));
  const uint64_t huge = AnonPages::kHugePage;
  const uint64_t bytes = std::max<uint64_t>(o.bytes & ~(huge - 1), 64ull << 20);
  const AnonPages mem(bytes, o.huge_pages, "read-bandwidth probe (--probe-mb)");
  uint8_t* buf = mem.data();
  ReadBandwidth r;
  r.huge_pages = o.huge_pages;
  PinWorkers pin(o.pin_threads, num_threads());
  r.pinned = pin.active();
  // First touch from the workers (every page faulted in before timing), non-zero words.
  parallel_for(static_cast<int64_t>(bytes / 4096), 256, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) std::fill_n(buf + i * 4096, 4096, static_cast<uint8_t>(i));
  });
  const MemRegion one{buf, bytes};
  uint64_t total = 0;
  const std::vector<Chunk> chunks = split(std::span<const MemRegion>(&one, 1), &total);
  run_passes(chunks, total, o.passes, true, r);
  return r;
}

ReadBandwidth measure_read_bandwidth(uint64_t bytes, int runs) {
  ReadProbeOptions o;
  o.bytes = bytes;
  o.passes = runs;
  return measure_read_bandwidth(o);
}

ReadBandwidth measure_region_read_bandwidth(std::span<const MemRegion> regions, int passes, bool warm_up,
                                            bool pin_threads) {
  if (passes < 1) throw Error("read-bandwidth probe: passes must be >= 1, got " + std::to_string(passes));
  for (size_t i = 0; i < regions.size(); ++i)
    if (regions[i].data == nullptr && regions[i].bytes > 0)
      throw Error("read-bandwidth probe: region " + std::to_string(i) + " has no data");
  uint64_t total = 0;
  const std::vector<Chunk> chunks = split(regions, &total);
  if (total < (1ull << 20))
    throw Error("read-bandwidth probe: the regions hold " + std::to_string(total) +
                " bytes; at least 1 MiB is needed for a bandwidth figure");
  ReadBandwidth r;
  PinWorkers pin(pin_threads, num_threads());
  r.pinned = pin.active();
  run_passes(chunks, total, passes, warm_up, r);
  return r;
}

}  // namespace k3
