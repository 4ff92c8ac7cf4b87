// k3_bench_bandwidth — the built-in streaming read probe (kernels/read_bandwidth.h) for 1..N
// threads and a few buffer sizes: the machine's practical DRAM read limit that `k3 bench`
// compares decode with.   k3_bench_bandwidth [--mb 1024] [--runs 7]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/dispatch.h"
#include "kernels/read_bandwidth.h"
#include "kernels/threads.h"

int main(int argc, char** argv) try {
  uint64_t mb = 1024;
  int runs = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--mb") mb = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--runs") runs = std::atoi(argv[i + 1]);
  }
  const int max_t = k3::num_threads();
  std::printf("ISA %s; buffer %llu MiB; median of %d runs\n\n| threads | buffer MiB | median GB/s | best GB/s |\n|---|---|---|---|\n",
              k3::isa_name(k3::active_isa()), static_cast<unsigned long long>(mb), runs);
  for (int t = 1; t <= max_t; ++t) {
    k3::set_num_threads(t);
    for (uint64_t m : {mb / 4, mb}) {
      const k3::ReadBandwidth r = k3::measure_read_bandwidth(m << 20, runs);
      std::printf("| %d | %llu | %.2f | %.2f |\n", t, static_cast<unsigned long long>(r.bytes >> 20),
                  r.median_gbs, r.best_gbs);
      std::fflush(stdout);
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "k3_bench_bandwidth: error: %s\n", e.what());
  return 1;
}
