// k3_bench_trunk_memory — the trunk's decode read from the checkpoint's mapping vs from its copy in
// 2 MiB pages (`--trunk-memory copy`, model/weights.h copy_trunk), in one process: both weight
// sets are bound from the same checkpoint, one is copied (drop_mapped off, so the mapping stays
// resident), and one "sweep" — a T = 1 k3::matmul of every copied matrix, i.e. a decode step's
// trunk GEMVs — alternates between the two sample by sample, so a shared machine's load drift
// hits both alike. Also the read probe (kernels/read_bandwidth.h) over the same two memories.
// Medians of --samples sweeps, GB/s of weights read, for 1..N threads. Needs RAM for the mapping
// and the copy (the bench model: 9.5 + 6.2 GB).
//
//   k3_bench_trunk_memory --model /tmp/k3-bench [--samples 9]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/page_in.h"
#include "io/checkpoint.h"
#include "kernels/dispatch.h"
#include "kernels/ops.h"
#include "kernels/read_bandwidth.h"
#include "kernels/threads.h"
#include "model/weights.h"
#include "tools/exec_env.h"

namespace {
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) try {
  k3tools::exec_config({}, k3::Numerics::Exact, 0);  // K3_ISA / K3_NUMERICS / K3_MXFP4 / K3_KERNELS
  int samples = 9;
  std::string model;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--samples") samples = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--model") model = argv[i + 1];
    else {
      std::fprintf(stderr, "k3_bench_trunk_memory: unknown flag %s (--model DIR, --samples N)\n", a.c_str());
      return 2;
    }
  }
  if (model.empty()) {
    std::fprintf(stderr, "k3_bench_trunk_memory: --model DIR is required (e.g. /tmp/k3-bench)\n");
    return 2;
  }
  auto ck = k3::Checkpoint::open(model);
  k3::ModelWeights mapped = k3::bind_weights(*ck);
  k3::page_in(k3::mapped_weight_ranges(mapped));
  k3::ModelWeights copied = k3::bind_weights(*ck);
  const k3::TrunkCopyStats st = k3::copy_trunk(copied, /*drop_mapped=*/false);
  // the copied matrices, and the same matrices in the mapping (copy_trunk keeps their names)
  std::map<std::string, const k3::TensorView*> by_name;
  for (const k3::TensorView& t : ck->tensors()) by_name[t.name] = &t;
  std::vector<const k3::TensorView*> vc, vm;
  for (const k3::TensorView& v : copied.trunk_copy_views) {
    vc.push_back(&v);
    vm.push_back(by_name.at(v.name));
  }
  int64_t max_k = 0;
  for (const auto* v : vc) max_k = std::max(max_k, v->shape.size() == 2 ? std::max(v->shape[0], v->shape[1]) : 0);
  std::vector<float> x(static_cast<size_t>(max_k), 0.01f), y(static_cast<size_t>(max_k));
  std::vector<k3::MemRegion> rm, rc;
  for (size_t i = 0; i < vc.size(); ++i) {
    rm.push_back({vm[i]->data, vm[i]->nbytes});
    rc.push_back({vc[i]->data, vc[i]->nbytes});
  }
  std::printf("%s: %zu trunk matrices, %.2f GB; copy %.1f s, %.2f GB of it in 2 MiB pages; ISA %s; "
              "%d sweeps per cell, alternating\n\n",
              model.c_str(), vc.size(), st.bytes / 1e9, st.seconds, st.huge_bytes / 1e9,
              k3::isa_name(k3::active_isa()), samples);
  std::printf("| threads | GEMV sweep, mapped GB/s | GEMV sweep, copy GB/s | copy / mapped | read probe, mapped GB/s | "
              "read probe, copy GB/s |\n|---|---|---|---|---|---|\n");
  const int max_t = k3::num_threads();
  for (int t = 1; t <= max_t; ++t) {
    k3::set_num_threads(t);
    auto sweep = [&](const std::vector<const k3::TensorView*>& ws) {
      const double t0 = now_s();
      for (const auto* w : ws)
        if (w->shape.size() == 2) k3::matmul(*w, x.data(), 1, y.data());
      return st.bytes / (now_s() - t0) / 1e9;
    };
    sweep(vm);
    sweep(vc);
    std::vector<double> gm, gc, pm, pc;
    for (int s = 0; s < samples; ++s) {
      if (s % 2 == 0) {
        gm.push_back(sweep(vm));
        gc.push_back(sweep(vc));
      } else {
        gc.push_back(sweep(vc));
        gm.push_back(sweep(vm));
      }
    }
    for (int s = 0; s < 3; ++s) {
      pm.push_back(k3::measure_region_read_bandwidth(rm, 1, s == 0).median_gbs);
      pc.push_back(k3::measure_region_read_bandwidth(rc, 1, s == 0).median_gbs);
    }
    std::printf("| %d | %.2f | %.2f | %.2fx | %.2f | %.2f |\n", t, median(gm), median(gc), median(gc) / median(gm),
                median(pm), median(pc));
    std::fflush(stdout);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "k3_bench_trunk_memory: error: %s\n", e.what());
  return 1;
}
