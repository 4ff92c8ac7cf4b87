#include "kernels/read_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "core/error.h"
#include "kernels/dispatch.h"
#include "kernels/threads.h"

namespace k3 {

ReadBandwidth measure_read_bandwidth(uint64_t bytes, int runs) {
  if (runs < 1) throw Error("read-bandwidth probe: runs must be >= 1, got " + std::to_string(runs));
  bytes = std::max<uint64_t>(bytes & ~uint64_t(4095), 64ull << 20);
  const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
  float* buf = static_cast<float*>(std::aligned_alloc(4096, bytes));
  if (buf == nullptr) throw Error("read-bandwidth probe: cannot allocate " + std::to_string(bytes) + " bytes");
  std::unique_ptr<float, decltype(&std::free)> hold(buf, &std::free);
  const int64_t grain = 1 << 16;  // 256 KiB slices
  parallel_for(n, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) buf[i] = 1.0f;
  });
  const KernelTable& kt = kernels();
  ReadBandwidth r;
  r.bytes = bytes;
  r.threads = num_threads();
  volatile float sink = 0;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    float tot = 0;
    std::mutex mu;
    parallel_for(n, grain, [&](int64_t b, int64_t e) {
      const float part = kt.read_sum(buf + b, e - b);  // one contiguous chunk (>= 256 KiB)
      std::lock_guard<std::mutex> lk(mu);
      tot += part;
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink + tot;
    r.run_gbs.push_back(static_cast<double>(bytes) / s / 1e9);
  }
  std::vector<double> v = r.run_gbs;
  std::sort(v.begin(), v.end());
  r.median_gbs = v[v.size() / 2];
  r.best_gbs = v.back();
  return r;
}

}  // namespace k3
