// probe_drive: reader threads pulling record indices from an atomic counter.
#include "io/drive_probe.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "core/error.h"

namespace k3 {

namespace {

constexpr uint64_t kAlign = 4096;

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

struct Record {
  size_t file;
  uint64_t offset;
};

}  // namespace

DriveProbeResult probe_drive(const std::vector<std::string>& files, const DriveProbeOptions& o) {
  if (o.record_bytes == 0 || o.records < 1 || o.in_flight < 1)
    throw Error("drive probe: record_bytes, records and in_flight must be >= 1");
  const uint64_t rec = (o.record_bytes + kAlign - 1) / kAlign * kAlign;
  struct F {
    std::string path;
    uint64_t size;
    Fd direct, buffered;
  };
  std::vector<std::unique_ptr<F>> fs;
  for (const std::string& p : files) {
    struct stat sb {};
    if (::stat(p.c_str(), &sb) != 0) throw Error(p + ": drive probe: cannot stat: " + std::strerror(errno));
    if (static_cast<uint64_t>(sb.st_size) < rec) continue;
    auto f = std::make_unique<F>();
    f->path = p;
    f->size = static_cast<uint64_t>(sb.st_size);
    f->buffered.fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (f->buffered.fd < 0) throw Error(p + ": drive probe: cannot open: " + std::strerror(errno));
    if (o.direct) f->direct.fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    fs.push_back(std::move(f));
  }
  if (fs.empty()) throw Error("drive probe: no file holds one record of " + std::to_string(rec) + " bytes");
  std::vector<Record> plan;
  std::mt19937_64 rng(o.seed);
  size_t fi = 0;
  uint64_t off = 0;
  for (int64_t i = 0; i < o.records; ++i) {
    if (o.random) {
      const size_t f = static_cast<size_t>(rng() % fs.size());
      const uint64_t slots = (fs[f]->size - rec) / kAlign + 1;
      plan.push_back({f, (rng() % slots) * kAlign});
    } else {
      if (off + rec > fs[fi]->size) {
        fi = (fi + 1) % fs.size();
        off = 0;
      }
      plan.push_back({fi, off});
      off += rec;
    }
  }
  std::atomic<int64_t> next{0};
  std::atomic<uint64_t> total{0};
  std::atomic<bool> all_direct{true};
  std::mutex err_mu;
  std::string err;
  auto worker = [&] {
    void* raw = std::aligned_alloc(kAlign, rec);
    if (!raw) {
      std::lock_guard<std::mutex> g(err_mu);
      err = "drive probe: out of memory";
      return;
    }
    std::unique_ptr<void, decltype(&std::free)> buf(raw, &std::free);
    for (int64_t i; (i = next.fetch_add(1)) < o.records;) {
      const Record& r = plan[static_cast<size_t>(i)];
      F& f = *fs[r.file];
      bool direct = f.direct.fd >= 0;
      uint64_t done = 0;
      while (done < rec) {
        const ssize_t n = ::pread(direct ? f.direct.fd : f.buffered.fd, static_cast<uint8_t*>(buf.get()) + done,
                                  static_cast<size_t>(rec - done), static_cast<off_t>(r.offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && direct && errno == EINVAL) {
          direct = false;
          continue;
        }
        if (n <= 0) {
          std::lock_guard<std::mutex> g(err_mu);
          err = f.path + ": drive probe: " + (n < 0 ? std::string(std::strerror(errno)) : "unexpected end of file");
          return;
        }
        done += static_cast<uint64_t>(n);
      }
      if (!direct) all_direct = false;
      total += done;
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> th;
  for (int i = 0; i < o.in_flight; ++i) th.emplace_back(worker);
  for (auto& t : th) t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!err.empty()) throw Error(err);
  DriveProbeResult res;
  res.bytes = total;
  res.seconds = s;
  res.gbs = s > 0 ? static_cast<double>(total) / s / 1e9 : 0;
  res.direct = all_direct;
  res.records = o.records;
  return res;
}

bool drop_page_cache() {
  ::sync();
  FILE* f = std::fopen("/proc/sys/vm/drop_caches", "w");
  if (!f) return false;
  const bool ok = std::fputs("3\n", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

}  // namespace k3
