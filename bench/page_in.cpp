// Page-in of a checkpoint's mapped weights (core/page_in.h, `k3 run/chat/serve --warm`): the
// rate from the drive with the checkpoint's pages evicted first, per number of reads in flight,
// and the cost of a second page-in when every page is already resident (mincore only).
//
//   k3_bench_page_in -m DIR [--io-threads 1,4,16] [--no-evict] [--json]
//
// DIR: a checkpoint, e.g. tools/reference/gen_bench_model.py --out /tmp/k3-bench --layers 2
// --experts 16 (≈ 3 GB). Before each cold pass the checkpoint is closed and its shard files are
// evicted from the page cache (posix_fadvise DONTNEED: this checkpoint only, nothing else of the
// machine's cache), then opened again and paged in.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/page_in.h"
#include "io/checkpoint.h"
#include "model/k3_model.h"

namespace {

// Drops the page-cache pages of DIR's safetensors files (clean pages not mapped by anyone).
void evict(const std::filesystem::path& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) throw k3::Error(e.path().string() + ": cannot open");
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"k3 page-in benchmark"};
  std::string dir;
  std::vector<int> io_threads{1, 4, 16};
  bool no_evict = false, json = false;
  app.add_option("-m,--model", dir, "checkpoint directory")->required();
  app.add_option("--io-threads", io_threads, "reads in flight, one cold pass each")->delimiter(',');
  app.add_flag("--no-evict", no_evict, "do not evict the checkpoint's pages before a cold pass");
  app.add_flag("--json", json, "JSON output");
  CLI11_PARSE(app, argc, argv);
  try {
    nlohmann::json out = nlohmann::json::array();
    for (int t : io_threads) {
      if (!no_evict) evict(dir);
      auto ck = k3::Checkpoint::open(dir);
      const k3::Model m(*ck);
      k3::PageInOptions o;
      o.threads = t;
      const k3::PageInStats cold = k3::page_in(m.mapped_weight_ranges(), o);
      const k3::PageInStats warm = k3::page_in(m.mapped_weight_ranges(), o);
      const double gib = 1024.0 * 1024.0 * 1024.0;
      out.push_back({{"io_threads", t},
                     {"bytes", cold.bytes},
                     {"read_bytes", cold.read_bytes},
                     {"cold_s", cold.seconds},
                     {"cold_mib_s", static_cast<double>(cold.read_bytes) / 1048576.0 / cold.seconds},
                     {"resident_s", warm.seconds}});
      if (!json)
        std::printf("io-threads %3d: %.2f GiB, %.2f GiB read in %.2f s = %.0f MiB/s; again (all resident): %.3f s\n", t,
                    static_cast<double>(cold.bytes) / gib, static_cast<double>(cold.read_bytes) / gib, cold.seconds,
                    static_cast<double>(cold.read_bytes) / 1048576.0 / cold.seconds, warm.seconds);
    }
    if (json) std::printf("%s\n", out.dump(1).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "k3_bench_page_in: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
