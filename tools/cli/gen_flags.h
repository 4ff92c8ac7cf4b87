// Flags shared by the generating subcommands (`k3 run`, `k3 chat`): model, context, threads and
// the llama.cpp-style sampling knobs. Defaults are llama.cpp's (K3's generation_config is
// unverified, spec §5.2): temp 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat-penalty 1.0 (off)
// over the last 64 ids; the seed is random unless --seed is given.
#pragma once
#include <omp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <string>

#include "core/page_in.h"
#include "flag_checks.h"
#include "io/memory_plan.h"
#include "kernels/threads.h"
#include "cache_type_flag.h"
#include "exec_flags.h"
#include "omp_wait.h"
#include "ranks.h"
#include "runtime/loaded_model.h"
#include "runtime/sampler.h"

namespace k3cli {

/// -t N: the kernels' worker count (k3::set_num_threads) and OpenMP's (omp_set_num_threads);
/// n <= 0 keeps all hardware threads.
inline void set_threads(int n) {
  k3::set_num_threads(n);
  if (n > 0) omp_set_num_threads(n);
}

/// One stderr line of expert-streaming counters: I/O mode, cache budget, hit rate, bytes and reads,
/// seconds the forward pass waited for reads (the drive rate is measured by bench/expert_stream);
/// with prefetch, how often the next-layer prediction named an expert the layer used and what the
/// prefetch reads became (used, wasted, cancelled before reading).
inline std::string expert_stream_line(const k3::ExpertStore& s) {
  const k3::ExpertStoreStats st = s.stats();
  const uint64_t n = st.hits + st.misses;
  char b[320];
  std::snprintf(b, sizeof b,
                "experts streamed (%s, cache %.2f GB): %llu acquired, hit rate %.1f%%, %.3f GB read in %llu reads, "
                "%.2f s waiting for reads",
                s.io_mode().c_str(), static_cast<double>(s.options().cache_bytes) / 1e9,
                static_cast<unsigned long long>(n),
                n ? 100.0 * static_cast<double>(st.hits) / static_cast<double>(n) : 0.0,
                static_cast<double>(st.bytes_read) / 1e9, static_cast<unsigned long long>(st.reads), st.wait_seconds);
  std::string line = b;
  if (!s.options().prefetch) return line + "; prefetch off";
  std::snprintf(b, sizeof b,
                "; prefetch: prediction right %.1f%% (%llu of %llu), %llu read ahead (%llu used, %llu wasted = %.3f GB, "
                "%llu cancelled)",
                st.predicted ? 100.0 * static_cast<double>(st.predicted_right) / static_cast<double>(st.predicted) : 0.0,
                static_cast<unsigned long long>(st.predicted_right), static_cast<unsigned long long>(st.predicted),
                static_cast<unsigned long long>(st.prefetched), static_cast<unsigned long long>(st.prefetch_used),
                static_cast<unsigned long long>(st.prefetch_wasted), static_cast<double>(st.prefetch_wasted_bytes) / 1e9,
                static_cast<unsigned long long>(st.prefetch_cancelled));
  return line + b;
}

/// --prefetch-experts on|off (default on) into `value`. Other values: a CLI error naming the flag.
inline void add_prefetch_flag(CLI::App* sub, bool& value) {
  sub->add_option_function<std::string>(
         "--prefetch-experts",
         [&value](const std::string& v) {
           if (v != "on" && v != "off")
             throw CLI::ValidationError("--prefetch-experts", "expected on or off, found '" + v + "'");
           value = v == "on";
         },
         "streamed experts: read the next MoE layer's predicted experts (its router on this layer's input) "
         "while this layer computes (default on)")
      ->type_name("on|off");
}

struct GenFlags {
  std::string model_dir;
  NumericsFlag numerics;  ///< default: k3::default_numerics()
  int64_t n_predict = 128;
  int64_t n_ctx = 4096;
  int64_t n_batch = 512;
  int threads = 0;  ///< 0 = all hardware threads
  k3::SamplerParams sampling;
  uint64_t seed = 0;           ///< the --seed value (any uint64); meaningful when seed_is_given
  bool seed_is_given = false;  ///< false = draw a random seed (printed in the stats, so it replays)
  bool seed_given() const { return seed_is_given; }
  // Experts streamed from SSD: --stream-experts, implied by --expert-cache-gb.
  bool stream_experts = false;
  double expert_cache_gb = 0;  ///< byte budget of the expert cache in GB (1e9 bytes); 0 = none
  int io_threads = 16;         ///< expert reads in flight
  bool no_direct_io = false;   ///< buffered pread instead of O_DIRECT
  bool prefetch_experts = true;  ///< --prefetch-experts on|off: next-layer prediction and read-ahead
  bool expert_cache_given = false;
  double ram_gb = 0;  ///< --ram-gb: check the memory plan at start-up (0 = off unless streaming)
  bool warm = false;  ///< --warm: page the model's mapped weights in after loading
  std::string trunk_type = "bf16";
  std::string trunk_memory = "map";  ///< --trunk-memory (io/memory_plan.h TrunkMemory)
  CacheTypeFlag cache_type;  ///< --cache-type

  /// Model options of these flags (--trunk-type, --cache-type, --numerics, -t; K3_* via exec_flags.h).
  /// Errors: k3::Error on an unknown trunk type, as exec_config for the rest.
  k3::ModelOptions model_options() const {
    k3::ModelOptions mo;
    mo.exec = numerics.exec(k3::default_numerics(), threads);
    mo.comm = world();  // the ranks of this process (ranks.h)
    const auto t = k3::trunk_type_from_name(trunk_type);
    if (!t) throw k3::Error("--trunk-type: expected bf16, q8 or q4, found '" + trunk_type + "'");
    if (*t == k3::TrunkType::Q8) mo.trunk_quant = k3::QuantKind::Q8;
    if (*t == k3::TrunkType::Q4) mo.trunk_quant = k3::QuantKind::Q4;
    const auto m = k3::trunk_memory_from_name(trunk_memory);
    if (!m) throw k3::Error("--trunk-memory: expected map or copy, found '" + trunk_memory + "'");
    mo.trunk_memory = *m;
    mo.mla_cache = cache_type.type();
    return mo;
  }

  /// The start-up memory check when --ram-gb is given or experts are streamed: the
  /// plan of io/memory_plan.h for this checkpoint (headers only), -c and `n_parallel`; RAM =
  /// --ram-gb or the physical RAM. Refuses (k3::Error with the plan's numbers and suggestion)
  /// when it does not fit; with --ram-gb and streaming and no --expert-cache-gb, the expert
  /// cache becomes what the plan leaves. Prints the plan on stderr when --ram-gb is given.
  /// Returns stream_options() with that cache.
  k3::ExpertStreamOptions checked_stream_options(int64_t n_parallel) const {
    k3::ExpertStreamOptions so = stream_options();
    if (ram_gb <= 0 && !stream_experts) return so;
    k3::CheckpointOptions co;
    co.map_data = false;
    const auto ck = k3::Checkpoint::open(model_dir, co);
    k3::PlanRequest r;
    r.ram_bytes = ram_gb > 0
                      ? static_cast<uint64_t>(ram_gb * 1e9)
                      : static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    r.trunk = *k3::trunk_type_from_name(trunk_type == "q8" || trunk_type == "q4" ? trunk_type : "bf16");
    r.trunk_memory = k3::trunk_memory_from_name(trunk_memory).value_or(k3::TrunkMemory::Map);
    r.stream_experts = stream_experts;
    if (expert_cache_given) r.expert_cache_bytes = static_cast<uint64_t>(expert_cache_gb * 1e9);
    r.n_ctx = n_ctx;
    r.mla_cache = cache_type.type();
    r.n_parallel = n_parallel;
    const k3::MemoryPlan p = k3::make_memory_plan(ck->config(), k3::weight_bytes(*ck), r);
    if (ram_gb > 0) std::fprintf(stderr, "%s", p.format().c_str());
    if (!p.fits) throw k3::Error(p.refusal);
    if (ram_gb > 0 && stream_experts && !expert_cache_given) so.store.cache_bytes = p.expert_cache;
    return so;
  }

  /// The ExpertStore settings of these flags (enabled by --stream-experts or --expert-cache-gb).
  k3::ExpertStreamOptions stream_options() const {
    k3::ExpertStreamOptions so;
    so.enabled = stream_experts;
    so.store.cache_bytes = static_cast<uint64_t>(expert_cache_gb * 1e9);
    so.store.io_threads = io_threads;
    so.store.direct = !no_direct_io;
    so.store.prefetch = prefetch_experts;
    return so;
  }

  /// Declares -m, -n, -c, -b, -t, --temp, --top-k, --top-p, --min-p, --repeat-penalty,
  /// --repeat-last-n, --seed, --stream-experts, --expert-cache-gb, --io-threads, --no-direct-io,
  /// --prefetch-experts, --ram-gb, --trunk-type, --trunk-memory, --cache-type,
  /// --warm on `sub`.
  void add_to(CLI::App* sub) {
    sub->add_option("-m,--model", model_dir, "K3 checkpoint directory (config.json, safetensors, tiktoken.model)")
        ->required();
    sub->add_option("-n,--n-predict", n_predict, "tokens to generate (-1 = until a stop token or the context is full)")
        ->capture_default_str()
        ->check(IntRange(-1));
    sub->add_option("-c,--ctx-size", n_ctx, "context size in tokens (prompt + generated)")
        ->capture_default_str()
        ->check(IntRange(1));
    sub->add_option("-b,--batch-size", n_batch, "prompt tokens per forward call")
        ->capture_default_str()
        ->check(IntRange(1));
    sub->add_option("-t,--threads", threads, "worker threads (0 = all hardware threads)")
        ->capture_default_str()
        ->check(IntRange(0, 1 << 20));
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
        ->capture_default_str()
        ->check(IntRange(-1, INT32_MAX));
    sub->add_option_function<std::string>(
           "--seed",
           [this](const std::string& v) {
             if (!parse_uint64(v, seed))
               throw CLI::ValidationError("--seed",
                                          "expected an integer in [0, 18446744073709551615], found '" + v + "'");
             seed_is_given = true;
           },
           "RNG seed, any unsigned 64-bit integer (default: random, printed in the stats; that value replays the run)")
        ->type_name("UINT64");
    sub->add_flag("--stream-experts", stream_experts,
                  "read routed experts from the shards on demand (O_DIRECT) instead of mapping them");
    sub->add_option_function<double>(
           "--expert-cache-gb",
           [this](double v) {
             if (!(v >= 0 && v <= 1e6))
               throw CLI::ValidationError("--expert-cache-gb",
                                          "expected a number of GB in [0, 1e6], found " + number_text(v));
             expert_cache_gb = v;
             expert_cache_given = true;
             stream_experts = true;
           },
           "streamed experts: LRU cache budget in GB (0 = no cache); implies --stream-experts")
        ->type_name("GB");
    sub->add_option("--io-threads", io_threads, "reads in flight: streamed experts, and the page-in of --warm")
        ->capture_default_str()
        ->check(IntRange(1, 1024));
    sub->add_flag("--no-direct-io", no_direct_io, "streamed experts: buffered pread instead of O_DIRECT");
    add_prefetch_flag(sub, prefetch_experts);
    sub->add_option("--ram-gb", ram_gb,
                    "check the memory plan for this much RAM (GB) at start-up; refuse if it does not fit")
        ->check(CLI::Range(0.0, 1e7));
    sub->add_option("--trunk-type", trunk_type,
                    "trunk weights in RAM: bf16 (as published), q8 or q4 (quantized at load)")
        ->capture_default_str()
        ->check(CLI::IsMember({"bf16", "q8", "q4"}));
    sub->add_option("--trunk-memory", trunk_memory,
                    "where the trunk's matrices live: map (the checkpoint's page-cache pages) or copy (copied at "
                    "load into anonymous 2 MiB pages, the page cache's copy dropped: same RAM, faster reads)")
        ->capture_default_str()
        ->check(CLI::IsMember({"map", "copy"}));
    sub->add_flag("--warm", warm,
                  "read the model's mapped weights into RAM after loading (the trunk, and the routed experts "
                  "unless streamed), --io-threads at a time; pages already in RAM are skipped; a progress bar "
                  "when it takes over a second");
    cache_type.add_to(sub);
    numerics.add_to(sub);
  }

  /// --warm: pages `lm`'s mapped weights in (core/page_in.h, Model::mapped_weight_ranges) with
  /// --io-threads reads at a time, reporting ("page-in", bytes done, bytes) to `progress`.
  /// Without --warm: nothing (nullopt). Errors: page_in's.
  std::optional<k3::PageInStats> warm_up(const k3::LoadedModel& lm, const k3::ProgressFn& progress) const {
    if (!warm) return std::nullopt;
    k3::PageInOptions po;
    po.threads = io_threads;
    return k3::page_in(lm.model->mapped_weight_ranges(), po, progress);
  }

  /// Final sampler parameters (draws the random seed when none was given; under N ranks rank 0's
  /// draw is broadcast, a collective call, so every rank samples the same ids) — validated.
  k3::SamplerParams sampler_params() const {
    k3::SamplerParams p = sampling;
    p.seed = seed_given() ? seed : (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    if (!seed_given() && world()->size() > 1) world()->broadcast(&p.seed, sizeof p.seed, 0);
    p.validate();
    return p;
  }
};

}  // namespace k3cli
