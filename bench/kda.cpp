// KDA delta-rule benchmark (algorithms.md §1.5): tokens/s and GFLOP/s of
//   recurrent  kda_recurrent   (the plain single-threaded oracle, token by token)
//   decode     kda_decode_step (vectorized, heads in parallel) called once per token
//   chunk      kda_chunk       (chunkwise WY/UT form, C = 64, heads in parallel)
// at K3 shapes (H = 96 heads, K = V = 128), and per head (H = 1, one thread).
// Usage: k3_bench_kda [T_prefill=2048] [T_recurrent=128] [reps=3]
// FLOP counts are the algorithm's own (recurrent/decode 7*K*V per token and head; chunk counted
// per chunk from §1.5's terms), so GFLOP/s compares hardware efficiency, tokens/s compares speed.
// Timings: best of `reps` runs (steady_clock), with that run's CPU time (the thread's when one
// thread runs, else the process's, which then includes OpenMP workers' spin-waiting).
// Thread count: OMP_NUM_THREADS (threads.h).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <random>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/kda_chunk.h"
#include "kernels/kda_decode.h"
#include "kernels/kda_recurrent.h"
#include "kernels/threads.h"
#include "tools/exec_env.h"

namespace {

struct Inputs {
  int T, H, K, V;
  std::vector<float> q, k, v, g, beta, state, out;
};

Inputs make(int T, int H, int K, int V) {
  Inputs in{T, H, K, V, {}, {}, {}, {}, {}, {}, {}};
  std::mt19937 rng(5);
  std::normal_distribution<float> nrm(0.f, 1.f);
  std::uniform_real_distribution<float> uni(0.f, 1.f);
  const size_t nk = static_cast<size_t>(T) * H * K, nv = static_cast<size_t>(T) * H * V;
  in.q.resize(nk);
  in.k.resize(nk);
  in.g.resize(nk);
  in.v.resize(nv);
  in.out.resize(nv);
  for (size_t r = 0; r < nk; r += static_cast<size_t>(K)) {
    float sq = 0.f, sk = 0.f;
    for (int d = 0; d < K; ++d) {
      in.q[r + d] = nrm(rng);
      in.k[r + d] = nrm(rng);
      sq += in.q[r + d] * in.q[r + d];
      sk += in.k[r + d] * in.k[r + d];
    }
    for (int d = 0; d < K; ++d) {
      in.q[r + d] /= std::sqrt(sq + 1e-6f) * std::sqrt(static_cast<float>(K));
      in.k[r + d] /= std::sqrt(sk + 1e-6f);
    }
  }
  for (auto& x : in.g) x = -5.0f / (1.0f + std::exp(-nrm(rng)));  // K3 gate range (-5, 0)
  for (auto& x : in.v) x = nrm(rng);
  in.beta.resize(static_cast<size_t>(T) * H);
  for (auto& b : in.beta) b = 1.0f / (1.0f + std::exp(-nrm(rng)));
  in.state.assign(static_cast<size_t>(H) * K * V, 0.01f);
  return in;
}

struct Timing {
  double wall = 1e30;  // best wall-clock seconds
  double cpu = 1e30;   // CPU seconds of that best run: this thread's if single-threaded, else the
                       // process's (which then includes OpenMP workers' spin-waiting)
};

bool g_single_thread = false;

double cpu_now() {
  timespec ts{};
  clock_gettime(g_single_thread ? CLOCK_THREAD_CPUTIME_ID : CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

Timing best_of(int reps, const std::function<void()>& fn) {
  Timing best;
  for (int r = 0; r < reps; ++r) {
    const double c0 = cpu_now();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    const double c1 = cpu_now();
    const double w = std::chrono::duration<double>(t1 - t0).count();
    if (w < best.wall) best = {w, c1 - c0};
  }
  return best;
}

// Algorithm FLOPs per head for T tokens.
double flops_recurrent(int T, int K, int V) { return 7.0 * K * V * T; }
double flops_chunk(int T, int K, int V, int C) {
  double f = 0;
  for (int c0 = 0; c0 < T; c0 += C) {
    const double n = std::min(C, T - c0);
    f += 3 * n * K                        // prefix products and row scalings
         + 2 * (n * (n + 1) / 2) * 2 * K  // pair matrices L, Aqk
         + 2 * 2 * n * K * V              // (K.*P) S0 and (Q.*P) S0
         + (n * (n - 1) / 2) * 2 * V      // forward substitution
         + (n * (n + 1) / 2) * 2 * V      // Aqk U
         + K * V + 2 * n * K * V;         // state hand-off
  }
  return f;
}

// Wall-clock numbers, plus the same per CPU-second (process CPU time / threads): on a shared,
// oversubscribed machine the CPU-time column is the stable one.
void report(const char* name, int T, int H, Timing tm, double flops, int threads) {
  const double cpu = tm.cpu / threads;
  std::printf(
      "%-30s T=%5d H=%3d | wall %9.2f ms %9.1f tok/s %6.2f GFLOP/s | cpu/thr %9.2f ms "
      "%9.1f tok/s %6.2f GFLOP/s\n",
      name, T, H, tm.wall * 1e3, T / tm.wall, flops / tm.wall * 1e-9, cpu * 1e3, T / cpu, flops / cpu * 1e-9);
}

void run_shape(int H, int T_pre, int T_rec, int reps, bool single_thread) {
  const int K = 128, V = 128;
  const int saved = k3::num_threads();
  if (single_thread) k3::set_num_threads(1);
  g_single_thread = single_thread;
  const int nt = std::min(H, k3::num_threads());
  {
    Inputs in = make(T_rec, H, K, V);
    g_single_thread = true;  // the oracle is single-threaded
    const Timing s = best_of(reps, [&] {
      k3::kda_recurrent(in.T, H, K, V, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                        in.state.data(), in.out.data());
    });
    report("recurrent (oracle, 1 thread)", T_rec, H, s, H * flops_recurrent(T_rec, K, V), 1);
  }
  g_single_thread = single_thread;
  Inputs in = make(T_pre, H, K, V);
  for (k3::Isa isa : k3::supported_isas()) {
    char name[64];
    std::snprintf(name, sizeof name, "decode step x T [%s]", k3::isa_name(isa));
    const size_t hk = static_cast<size_t>(H) * K, hv = static_cast<size_t>(H) * V;
    const int T_dec = std::min(T_pre, 512);
    const Timing s = best_of(reps, [&] {
      for (int t = 0; t < T_dec; ++t)
        k3::kda_decode_step(isa, H, K, V, &in.q[t * hk], &in.k[t * hk], &in.v[t * hv], &in.g[t * hk],
                            &in.beta[static_cast<size_t>(t) * H], in.state.data(), &in.out[t * hv]);
    });
    report(name, T_dec, H, s, H * flops_recurrent(T_dec, K, V), nt);
    std::snprintf(name, sizeof name, "chunk C=64 [%s]", k3::isa_name(isa));
    const Timing c = best_of(reps, [&] {
      k3::kda_chunk(isa, T_pre, H, K, V, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                    in.state.data(), in.out.data(), 64);
    });
    report(name, T_pre, H, c, H * flops_chunk(T_pre, K, V, 64), nt);
  }
  k3::set_num_threads(saved);
}

}  // namespace

int main(int argc, char** argv) {
  k3tools::exec_config({}, k3::Numerics::Exact, 0);  // K3_ISA / K3_NUMERICS / K3_MXFP4 / K3_KERNELS
  const int T_pre = argc > 1 ? std::atoi(argv[1]) : 2048;
  const int T_rec = argc > 2 ? std::atoi(argv[2]) : 128;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 3;
  if (T_pre < 1 || T_rec < 1 || reps < 1) {
    std::fprintf(stderr, "usage: k3_bench_kda [T_prefill>=1] [T_recurrent>=1] [reps>=1]\n");
    return 1;
  }
  std::printf("KDA bench: K = V = 128, threads = %d, active ISA = %s\n", k3::num_threads(),
              k3::isa_name(k3::active_isa()));
  std::printf("-- K3 shape: 96 heads (all threads) --\n");
  run_shape(96, T_pre, T_rec, reps, false);
  std::printf("-- per head: 1 head, 1 thread --\n");
  run_shape(1, T_pre, T_rec * 8, reps, true);
  return 0;
}
