// k3_bench_bandwidth — the built-in streaming read probe (kernels/read_bandwidth.h) for 1..N
// threads, 4 KiB and 2 MiB pages, workers free or pinned, next to an independent STREAM-like
// cross-check (a plain OpenMP reduction loop over the same kind of buffer, compiled for the
// x86-64 baseline, no intrinsics; statically split, one contiguous share per thread). Rows are
// interleaved round by round (--rounds), so a shared machine's load drift hits every row alike;
// each cell is the median over rounds of each round's median pass. The probe's default
// (ReadProbeOptions) is the 2 MiB-page row with free workers; `k3 bench` prints both page sizes
// and compares decode with its weights probe.
//
//   k3_bench_bandwidth [--mb 1024] [--passes 7] [--rounds 3]
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/read_bandwidth.h"
#include "kernels/threads.h"
#include "tools/exec_env.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// STREAM-like "sum" kernel: each thread sums its contiguous share of 64-bit words; median GB/s of
// `passes` passes after one untimed pass.
double stream_like(uint64_t bytes, bool huge, int threads, int passes) {
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return 0;
  madvise(m, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  auto* w = static_cast<uint64_t*>(m);
  const int64_t n = static_cast<int64_t>(bytes / 8);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) w[i] = static_cast<uint64_t>(i);
  std::vector<double> gbs;
  volatile uint64_t sink = 0;
  for (int p = 0; p <= passes; ++p) {
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t s = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += w[i];
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink + s;
    if (p > 0) gbs.push_back(static_cast<double>(bytes) / t / 1e9);
  }
  munmap(m, bytes);
  return median(gbs);
}

}  // namespace

int main(int argc, char** argv) try {
  k3tools::exec_config({}, k3::Numerics::Exact, 0);  // K3_ISA / K3_NUMERICS / K3_MXFP4 / K3_KERNELS
  uint64_t mb = 1024;
  int passes = 7, rounds = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "k3_bench_bandwidth: %s needs a value\n", a.c_str());
      return 2;
    }
    const long v = std::strtol(argv[++i], nullptr, 10);
    if (v < 1) {
      std::fprintf(stderr, "k3_bench_bandwidth: %s must be a positive integer\n", a.c_str());
      return 2;
    }
    if (a == "--mb") mb = static_cast<uint64_t>(v);
    else if (a == "--passes") passes = static_cast<int>(v);
    else if (a == "--rounds") rounds = static_cast<int>(v);
    else {
      std::fprintf(stderr, "k3_bench_bandwidth: unknown flag %s (--mb, --passes, --rounds)\n", a.c_str());
      return 2;
    }
  }
  const int max_t = k3::num_threads();
  struct Row {
    int threads;
    bool huge, pin, stream;
    std::vector<double> med, spread, cpu;
  };
  std::vector<Row> rows;
  for (int t = 1; t <= max_t; ++t)
    for (bool huge : {false, true}) {
      rows.push_back({t, huge, false, false, {}, {}, {}});
      rows.push_back({t, huge, true, false, {}, {}, {}});
      rows.push_back({t, huge, false, true, {}, {}, {}});
    }
  for (int r = 0; r < rounds; ++r)
    for (Row& row : rows) {
      k3::set_num_threads(row.threads);
      if (row.stream) {
        row.med.push_back(stream_like(mb << 20, row.huge, row.threads, passes));
        continue;
      }
      k3::ReadProbeOptions o;
      o.bytes = mb << 20;
      o.passes = passes;
      o.huge_pages = row.huge;
      o.pin_threads = row.pin;
      const k3::ReadBandwidth b = k3::measure_read_bandwidth(o);
      row.med.push_back(b.median_gbs);
      row.spread.push_back(b.spread);
      row.cpu.push_back(b.cpu_share);
    }
  std::printf(
      "ISA %s; buffer %llu MiB; %d passes per probe, %d interleaved rounds (median of the rounds' medians)\n\n"
      "| threads | pages | reader | GB/s | rounds GB/s | spread in a probe | CPU share |\n|---|---|---|---|---|---|---|\n",
      k3::isa_name(k3::active_isa()), static_cast<unsigned long long>(mb), passes, rounds);
  for (const Row& row : rows) {
    std::string all;
    for (double v : row.med) {
      char b[32];
      std::snprintf(b, sizeof b, "%s%.1f", all.empty() ? "" : " ", v);
      all += b;
    }
    const char* reader = row.stream ? "STREAM-like loop" : row.pin ? "probe, pinned" : "probe";
    if (row.stream)
      std::printf("| %d | %s | %s | %.2f | %s | | |\n", row.threads, row.huge ? "2 MiB" : "4 KiB", reader,
                  median(row.med), all.c_str());
    else
      std::printf("| %d | %s | %s | %.2f | %s | %.0f%% | %.2f |\n", row.threads, row.huge ? "2 MiB" : "4 KiB", reader,
                  median(row.med), all.c_str(), 100 * median(row.spread), median(row.cpu));
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "k3_bench_bandwidth: error: %s\n", e.what());
  return 1;
}
