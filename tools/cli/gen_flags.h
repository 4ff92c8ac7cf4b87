// Flags shared by the generating subcommands (`k3 run`, `k3 chat`): model, context, threads and
// the llama.cpp-style sampling knobs. Defaults are llama.cpp's (K3's generation_config is
// unverified, spec §5.2): temp 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat-penalty 1.0 (off)
// over the last 64 ids; the seed is random unless --seed is given.
#pragma once
#include <omp.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <random>
#include <string>

#include "flag_checks.h"
#include "kernels/threads.h"
#include "runtime/sampler.h"

namespace k3cli {

/// -t N: the kernels' worker count (k3::set_num_threads) and OpenMP's (omp_set_num_threads);
/// n <= 0 keeps all hardware threads.
inline void set_threads(int n) {
  k3::set_num_threads(n);
  if (n > 0) omp_set_num_threads(n);
}

struct GenFlags {
  std::string model_dir;
  int64_t n_predict = 128;
  int64_t n_ctx = 4096;
  int64_t n_batch = 512;
  int threads = 0;  ///< 0 = all hardware threads
  k3::SamplerParams sampling;
  uint64_t seed = 0;         ///< the --seed value (any uint64); meaningful when seed_is_given
  bool seed_is_given = false;  ///< false = draw a random seed (printed in the stats, so it replays)
  bool seed_given() const { return seed_is_given; }

  /// Declares -m, -n, -c, -b, -t, --temp, --top-k, --top-p, --min-p, --repeat-penalty,
  /// --repeat-last-n, --seed on `sub`.
  void add_to(CLI::App* sub) {
    sub->add_option("-m,--model", model_dir, "K3 checkpoint directory (config.json, safetensors, tiktoken.model)")
        ->required();
    sub->add_option("-n,--n-predict", n_predict, "tokens to generate (-1 = until a stop token or the context is full)")
        ->capture_default_str()->check(IntRange(-1));
    sub->add_option("-c,--ctx-size", n_ctx, "context size in tokens (prompt + generated)")
        ->capture_default_str()->check(IntRange(1));
    sub->add_option("-b,--batch-size", n_batch, "prompt tokens per forward call")
        ->capture_default_str()->check(IntRange(1));
    sub->add_option("-t,--threads", threads, "worker threads (0 = all hardware threads)")
        ->capture_default_str()->check(IntRange(0, 1 << 20));
    sub->add_option("--temp", sampling.temp, "temperature (0 = greedy, ties to the lowest id)")->capture_default_str();
    sub->add_option("--top-k", sampling.top_k, "keep the k most likely tokens (0 = off)")
        ->check(IntRange(0, INT32_MAX))
        ->capture_default_str();
    sub->add_option("--top-p", sampling.top_p, "nucleus: keep the smallest set with this probability mass (1 = off)")
        ->capture_default_str();
    sub->add_option("--min-p", sampling.min_p, "drop tokens below min-p x the top probability (0 = off)")
        ->capture_default_str();
    sub->add_option("--repeat-penalty", sampling.repeat_penalty, "penalize repeats of the last N tokens (1 = off)")
        ->capture_default_str();
    sub->add_option("--repeat-last-n", sampling.repeat_last_n, "N for --repeat-penalty (0 = off, -1 = all)")
        ->capture_default_str()->check(IntRange(-1, INT32_MAX));
    sub->add_option_function<std::string>(
           "--seed",
           [this](const std::string& v) {
             if (!parse_uint64(v, seed))
               throw CLI::ValidationError("--seed", "expected an integer in [0, 18446744073709551615], found '" + v + "'");
             seed_is_given = true;
           },
           "RNG seed, any unsigned 64-bit integer (default: random, printed in the stats; that value replays the run)")
        ->type_name("UINT64");
  }

  /// Final sampler parameters (draws the random seed when none was given) — validated.
  k3::SamplerParams sampler_params() const {
    k3::SamplerParams p = sampling;
    p.seed = seed_given() ? seed : (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    p.validate();
    return p;
  }
};

}  // namespace k3cli
