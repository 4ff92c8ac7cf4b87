// MLA attention kernels (kernels/mla_attend.h) in isolation: GFLOP/s of the tiled prefill
// (mla_attend_expanded) and of flash-decoding (mla_attend_absorbed) at a context depth, per ISA,
// timed in thread CPU seconds (1 thread) so a loaded machine disturbs it less than wall time.
// Usage: k3_bench_mla_attend [depth=16384] [T=256] [reps=3] [H=2 dn=32 dr=16 dv=32 kvr=64]
// FLOP counted: prefill 2·H·(dq + dv) per visible (query, row) pair (the causal half of the
// chunk's own rows) + the per-tile expansion 2·H·kvr·(dn + dv) per row per call; decode
// 2·H·(row + kvr) per row.
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "kernels/exec_config.h"
#include "kernels/mla_attend.h"

namespace {
double cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
}  // namespace

int main(int argc, char** argv) {
  auto arg = [&](int i, int64_t d) { return argc > i ? std::atoll(argv[i]) : d; };
  const int64_t depth = arg(1, 16384), T = arg(2, 256), reps = arg(3, 3);
  const k3::MlaAttnShape s{arg(4, 2), arg(5, 32), arg(6, 16), arg(7, 32), arg(8, 64)};
  const int64_t row = s.kvr + s.dr, dq = s.dn + s.dr, n_all = depth + T;
  std::mt19937 g(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> rows(static_cast<size_t>(n_all * row)), q(static_cast<size_t>(T * s.H * dq)),
      o(static_cast<size_t>(T * s.H * s.dv));
  for (auto& x : rows) x = u(g);
  for (auto& x : q) x = u(g);
  std::vector<uint16_t> kvb(static_cast<size_t>(s.H * (s.dn + s.dv) * s.kvr));
  for (auto& x : kvb) x = k3::f32_to_bf16(0.3f * u(g));
  k3::MlaKvbHalves h{kvb.data(), kvb.data() + s.dn * s.kvr, (s.dn + s.dv) * s.kvr, "bench.kv_b"};
  std::printf("depth %lld, T %lld, H %lld dn %lld dr %lld dv %lld kvr %lld; 1 thread, thread CPU time, best of %lld\n",
              static_cast<long long>(depth), static_cast<long long>(T), static_cast<long long>(s.H),
              static_cast<long long>(s.dn), static_cast<long long>(s.dr), static_cast<long long>(s.dv),
              static_cast<long long>(s.kvr), static_cast<long long>(reps));
  std::printf("| ISA | cache | prefill ms | prefill GFLOP/s | decode ms | decode GFLOP/s |\n|---|---|---|---|---|---|\n");
  for (k3::Isa isa : {k3::Isa::Scalar, k3::Isa::Avx2, k3::Isa::Avx512}) {
    k3::ExecConfig c;
    c.isa = isa;
    c.threads = 1;
    std::optional<k3::ExecContext> ctx;
    try {
      ctx = k3::resolve_exec_config(c);
    } catch (const k3::Error&) {
      continue;
    }
    const k3::ExecScope scope(*ctx);
    for (k3::MlaCacheType t : {k3::MlaCacheType::F32, k3::MlaCacheType::BF16}) {
      std::vector<uint8_t> enc(static_cast<size_t>(n_all * k3::mla_cache_row_bytes(t, s.kvr, s.dr)));
      k3::mla_cache_encode(t, rows.data(), n_all, s.kvr, s.dr, enc.data());
      const k3::MlaRows r{enc.data(), t};
      double bp = 1e30, bd = 1e30;
      for (int64_t i = 0; i < reps; ++i) {
        double t0 = cpu_s();
        k3::mla_attend_expanded(h, s, q.data(), T, r, depth, o.data());
        bp = std::min(bp, cpu_s() - t0);
        t0 = cpu_s();
        k3::mla_attend_absorbed(h, s, q.data(), 1, r, n_all - 1, o.data());
        bd = std::min(bd, cpu_s() - t0);
      }
      const double pairs = static_cast<double>(T) * depth + 0.5 * static_cast<double>(T) * (T + 1);
      const double fp = 2.0 * s.H * (pairs * (dq + s.dv) + static_cast<double>(n_all) * s.kvr * (s.dn + s.dv));
      const double fd = 2.0 * s.H * static_cast<double>(n_all) * (row + s.kvr);
      std::printf("| %s | %s | %.1f | %.1f | %.3f | %.1f |\n", k3::isa_name(isa), k3::mla_cache_type_name(t), 1e3 * bp,
                  fp / bp / 1e9, 1e3 * bd, fd / bd / 1e9);
    }
  }
  return 0;
}
