// Continuous-batching throughput: B concurrent streams through k3::Scheduler (the engine of
// `k3 serve`, without HTTP) for B = 1, 2, 4, ... — aggregate generated tokens/s, per-stream
// inter-token latency (p50 / p95) and the ratio to the single stream, plus a mixed load
// (streams arriving while long prompts prefill) with time-to-first-token p50 / p95.
// Usage: k3_bench_batch_decode MODEL_DIR [--streams 1,2,4,8,16,32] [--prompt N=32] [--decode N=32]
//        [--threads N] [--mixed R=0 requests] [--mixed-prompt N=512] [--numerics MODE]
//        [--trunk-type bf16|q8|q4]
// (--numerics: kernels/numerics.h, default K3_NUMERICS else exact; --trunk-type q8 with
// --numerics int8 is the q8 trunk with int8 activations, kernels/q8q4_trunk.h.)
// Decode is memory-bound: B streams read each weight once per step for all B rows, so the
// aggregate should grow ~B-fold until compute binds (target: >= 8x at B = 16 on the
// K3-width bench model, tools/reference/gen_bench_model.py).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/checkpoint.h"
#include "kernels/dispatch.h"
#include "kernels/exec_config.h"
#include "kernels/numerics.h"
#include "kernels/q8q4_trunk.h"
#include "kernels/threads.h"
#include "model/k3_model.h"
#include "runtime/scheduler.h"
#include "tools/exec_env.h"

namespace {

using clk = std::chrono::steady_clock;
double sec(clk::duration d) { return std::chrono::duration<double>(d).count(); }

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

std::vector<int32_t> prompt_of(int n, int seed, int64_t n_vocab) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 7919 + seed * 104729 + 13) % n_vocab);
  return v;
}

struct Run {
  double agg_tps = 0, itl_p50 = 0, itl_p95 = 0, ttft_p50 = 0, ttft_p95 = 0;
  int64_t tokens = 0;
};

/// Submits `reqs` at once (or at the given offsets) and drains them all; timings from events.
Run run(const k3::Model& m, int64_t n_parallel, const std::vector<k3::SeqRequest>& reqs,
        const std::vector<double>& delay_s) {
  k3::Scheduler::Options so;
  so.n_parallel = n_parallel;
  so.n_ctx = 8192;
  so.max_queue = 1024;
  k3::Scheduler sched(m, so);
  const auto t0 = clk::now();
  std::vector<std::shared_ptr<k3::SeqHandle>> hs(reqs.size());
  std::vector<std::vector<clk::time_point>> times(reqs.size());
  size_t submitted = 0, done = 0;
  while (done < reqs.size()) {
    while (submitted < reqs.size() && sec(clk::now() - t0) >= delay_s[submitted]) {
      hs[submitted] = sched.submit(reqs[submitted]);
      ++submitted;
    }
    for (size_t i = 0; i < submitted; ++i) {
      while (auto e = hs[i]->next(std::chrono::milliseconds(0))) {
        if (e->done) {
          ++done;
          if (e->finish != k3::FinishReason::Length) throw k3::Error("stream ended early: " + e->error);
          break;
        }
        times[i].push_back(e->time);
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const double wall = sec(clk::now() - t0);
  Run r;
  std::vector<double> itl, ttft;
  clk::time_point first = clk::time_point::max(), last = clk::time_point::min();
  for (size_t i = 0; i < reqs.size(); ++i) {
    r.tokens += static_cast<int64_t>(times[i].size());
    ttft.push_back(sec(times[i].front() - hs[i]->submitted()));
    first = std::min(first, times[i].front());
    last = std::max(last, times[i].back());
    for (size_t j = 1; j < times[i].size(); ++j) itl.push_back(sec(times[i][j] - times[i][j - 1]));
  }
  // Aggregate decode rate: tokens after each stream's first, over the span they were produced in.
  r.agg_tps = static_cast<double>(r.tokens - static_cast<int64_t>(reqs.size())) / std::max(1e-9, sec(last - first));
  if (reqs.size() == 1 || wall <= 0) r.agg_tps = static_cast<double>(r.tokens - 1) / std::max(1e-9, sec(last - first));
  r.itl_p50 = pct(itl, 0.5);
  r.itl_p95 = pct(itl, 0.95);
  r.ttft_p50 = pct(ttft, 0.5);
  r.ttft_p95 = pct(ttft, 0.95);
  return r;
}

}  // namespace

int main(int argc, char** argv) try {
  k3tools::exec_config({}, k3::Numerics::Exact, 0);  // K3_ISA / K3_NUMERICS / K3_MXFP4 / K3_KERNELS
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s MODEL_DIR [--streams 1,2,4,8,16,32] [--prompt N] [--decode N] "
                 "[--threads N] [--mixed R] [--mixed-prompt N] [--numerics MODE] [--trunk-type bf16|q8|q4]\n",
                 argv[0]);
    return 2;
  }
  std::vector<int64_t> streams = {1, 2, 4, 8, 16, 32};
  int n_prompt = 32, n_decode = 32, threads = 0, mixed = 0, mixed_prompt = 512;
  k3::ModelOptions mo;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--streams") {
      streams.clear();
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) streams.push_back(std::stoll(item));
    } else if (a == "--prompt") n_prompt = std::stoi(v);
    else if (a == "--decode") n_decode = std::stoi(v);
    else if (a == "--threads") threads = std::stoi(v);
    else if (a == "--mixed") mixed = std::stoi(v);
    else if (a == "--mixed-prompt") mixed_prompt = std::stoi(v);
    else if (a == "--numerics") mo.exec.numerics = k3::parse_numerics(v, "--numerics");
    else if (a == "--trunk-type") {
      if (v == "q8") mo.trunk_quant = k3::QuantKind::Q8;
      else if (v == "q4") mo.trunk_quant = k3::QuantKind::Q4;
      else if (v != "bf16") throw k3::Error("--trunk-type: expected bf16, q8 or q4, found '" + v + "'");
    } else throw k3::Error("unknown flag " + a);
  }
  if (threads > 0) k3::set_num_threads(threads);
  auto ck = k3::Checkpoint::open(argv[1]);
  const k3::Model m(*ck, mo);
  const int64_t n_vocab = m.config().vocab_size;
  std::printf("model %s | ISA %s | threads %d | numerics %s | trunk %s | prompt %d | decode %d per stream\n", argv[1],
              k3::isa_name(k3::active_isa()), k3::num_threads(), k3::numerics_name(k3::resolve_exec_config(m.options().exec).numerics),
              !mo.trunk_quant ? "bf16" : *mo.trunk_quant == k3::QuantKind::Q8 ? "q8" : "q4", n_prompt, n_decode);
  auto req = [&](int n, int seed, int decode) {
    k3::SeqRequest r;
    r.prompt = prompt_of(n, seed, n_vocab);
    r.sampling.temp = 0.0f;
    r.max_tokens = decode;
    return r;
  };
  {  // warm-up: touch every weight page once
    std::vector<k3::SeqRequest> w = {req(n_prompt, 99, 2)};
    run(m, 1, w, {0.0});
  }
  std::printf("| streams | aggregate tok/s | x single | ITL p50 ms | ITL p95 ms | TTFT p50 ms |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|\n");
  double single = 0;
  for (int64_t B : streams) {
    std::vector<k3::SeqRequest> reqs;
    for (int64_t i = 0; i < B; ++i) reqs.push_back(req(n_prompt, static_cast<int>(i), n_decode));
    const Run r = run(m, B, reqs, std::vector<double>(reqs.size(), 0.0));
    if (B == streams.front()) single = r.agg_tps / static_cast<double>(B);
    std::printf("| %lld | %.2f | %.2f | %.1f | %.1f | %.1f |\n", static_cast<long long>(B), r.agg_tps,
                r.agg_tps / single, r.itl_p50 * 1e3, r.itl_p95 * 1e3, r.ttft_p50 * 1e3);
    std::fflush(stdout);
  }
  if (mixed > 0) {
    // Mixed load: `mixed` requests, every 4th with a long prompt, arriving every 50 ms into
    // min(mixed, 8) slots.
    std::vector<k3::SeqRequest> reqs;
    std::vector<double> at;
    for (int i = 0; i < mixed; ++i) {
      reqs.push_back(req(i % 4 == 3 ? mixed_prompt : n_prompt, 1000 + i, n_decode));
      at.push_back(0.05 * i);
    }
    const Run r = run(m, std::min(mixed, 8), reqs, at);
    std::printf(
        "mixed load: %d requests (every 4th with a %d-token prompt) 50 ms apart, 8 slots: "
        "TTFT p50 %.1f ms p95 %.1f ms | ITL p50 %.1f ms p95 %.1f ms | aggregate %.2f tok/s\n",
        mixed, mixed_prompt, r.ttft_p50 * 1e3, r.ttft_p95 * 1e3, r.itl_p50 * 1e3, r.itl_p95 * 1e3, r.agg_tps);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "k3_bench_batch_decode: %s\n", e.what());
  return 1;
}
