// Whole-model speed: prefill and decode tokens/s for ModelKernels::Reference vs Fast.
// Usage: k3_bench_model_speed MODEL_DIR [--prompt N=256] [--decode N=32] [--runs R=3]
//        [--kernels fast|ref|both=both] [--chunk C=256] [--threads N]
// Prints per-run numbers and the median of R runs; prefill/decode per-token ratio for Fast.
// MXFP4 path: K3_MXFP4 (default int8); ISA: K3_ISA.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/checkpoint.h"
#include "kernels/dispatch.h"
#include "kernels/threads.h"
#include "model/k3_model.h"
#include "tools/exec_env.h"

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Speed {
  double prefill_tps, decode_tps;
};

Speed measure(const k3::Model& m, int n_prompt, int n_decode) {
  const int64_t n_vocab = m.config().vocab_size;
  std::vector<int32_t> ids(n_prompt);
  for (int i = 0; i < n_prompt; ++i) ids[i] = static_cast<int32_t>((i * 131 + 7) % n_vocab);
  auto seq = m.new_sequence();
  double t0 = now_s();
  auto l = m.forward(seq, ids, false);
  const double t_pre = now_s() - t0;
  t0 = now_s();
  for (int i = 0; i < n_decode; ++i) {
    const int32_t next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    l = m.forward(seq, std::span(&next, 1), false);
  }
  const double t_dec = now_s() - t0;
  return {n_prompt / t_pre, n_decode / t_dec};
}

}  // namespace

int main(int argc, char** argv) try {
  k3tools::exec_config({}, k3::Numerics::Exact, 0);  // K3_ISA / K3_NUMERICS / K3_MXFP4 / K3_KERNELS
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s MODEL_DIR [--prompt N] [--decode N] [--runs R] "
                 "[--kernels fast|ref|both] [--chunk C] [--threads N]\n",
                 argv[0]);
    return 2;
  }
  int n_prompt = 256, n_decode = 32, runs = 3;
  int64_t chunk = 256;
  std::string which = "both";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--prompt") n_prompt = std::stoi(argv[i + 1]);
    else if (a == "--decode") n_decode = std::stoi(argv[i + 1]);
    else if (a == "--runs") runs = std::stoi(argv[i + 1]);
    else if (a == "--kernels") which = argv[i + 1];
    else if (a == "--chunk") chunk = std::stoll(argv[i + 1]);
    else if (a == "--threads") k3::set_num_threads(std::stoi(argv[i + 1]));
    else throw k3::Error("unknown option " + a);
  }
  if (n_prompt < 1 || n_decode < 1 || runs < 1) throw k3::Error("--prompt/--decode/--runs must be >= 1");
  auto ck = k3::Checkpoint::open(argv[1]);
  std::printf("model %s  prompt %d  decode %d  runs %d  chunk %lld  ISA %s  threads %d\n", argv[1], n_prompt, n_decode,
              runs, static_cast<long long>(chunk), k3::isa_name(k3::active_isa()), k3::num_threads());
  for (const char* kname : {"ref", "fast"}) {
    if (which != "both" && which != kname) continue;
    k3::ModelOptions o;
    o.exec.kernels = std::strcmp(kname, "ref") == 0 ? k3::ModelKernels::Reference : k3::ModelKernels::Fast;
    o.prefill_chunk = chunk;
    const k3::Model m(*ck, o);
    std::vector<double> pre, dec;
    for (int r = 0; r < runs; ++r) {
      const Speed s = measure(m, n_prompt, n_decode);
      pre.push_back(s.prefill_tps);
      dec.push_back(s.decode_tps);
      std::printf("  %-4s run %d: prefill %10.1f tok/s  decode %8.1f tok/s\n", kname, r, s.prefill_tps, s.decode_tps);
    }
    const double p = median(pre), d = median(dec);
    std::printf(
        "%-4s (mxfp4 %s) median: prefill %10.1f tok/s  decode %8.1f tok/s  "
        "prefill-per-token speedup over decode-per-token %.1fx\n",
        kname,
        o.exec.kernels.value_or(k3::ModelKernels::Fast) == k3::ModelKernels::Fast
            ? (*m.options().exec.mxfp4 == k3::Mxfp4Path::Int8 ? "int8" : "exact")
            : "ref",
        p, d, p / d);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
