// The prefix cache on a multi-turn conversation: time to first token of each turn
// with the cache on and off (measured interleaved, turn by turn), the ids reused, the snapshot
// cost (bytes and ms per KDA snapshot, MLA bytes per block) and save / restore of the whole
// sequence after the last turn — beside the K3 report's AgentENV 133 ms checkpoint / 49 ms
// resume. Works on any checkpoint (token ids only, no tokenizer needed): K3-mini or the
// K3-width bench model (tools/reference/gen_bench_model.py).
// Usage: k3_bench_prefix_cache MODEL_DIR [--turns 10] [--system 512] [--user 96] [--answer 16]
//        [--block 256] [--threads 2] [--state-file /tmp/k3-bench-state.bin] [--off-every N=1]
// (--off-every N: recompute without the cache only every N-th turn and the last, to bound the
// run time on slow models; the other turns print "-".)
// Turn k's prompt = turn k-1's prompt + its greedy answer + a new user message: what a chat
// client sends each turn. TTFT = prefill + the first sampled id.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/checkpoint.h"
#include "kernels/dispatch.h"
#include "kernels/threads.h"
#include "model/k3_model.h"
#include "runtime/generator.h"
#include "runtime/model_fingerprint.h"
#include "runtime/prefix_cache.h"
#include "tools/exec_env.h"

namespace {

using clk = std::chrono::steady_clock;
double ms_since(clk::time_point t) { return std::chrono::duration<double, std::milli>(clk::now() - t).count(); }

std::vector<int32_t> ids_of(int n, int seed, int64_t n_vocab) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 7919 + seed * 104729 + 13) % n_vocab);
  return v;
}

int32_t argmax(const std::vector<float>& l) {
  return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
}

int64_t arg(int argc, char** argv, const char* name, int64_t def) {
  for (int i = 2; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::stoll(argv[i + 1]);
  return def;
}

}  // namespace

int main(int argc, char** argv) try {
  k3tools::exec_config({}, k3::Numerics::Exact, 0);  // K3_ISA / K3_NUMERICS / K3_MXFP4 / K3_KERNELS
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: k3_bench_prefix_cache MODEL_DIR [--turns 10] [--system 512] [--user 96] "
                 "[--answer 16] [--block 256] [--threads 2] [--state-file F]\n");
    return 2;
  }
  const int turns = static_cast<int>(arg(argc, argv, "--turns", 10));
  const int system = static_cast<int>(arg(argc, argv, "--system", 512));
  const int user = static_cast<int>(arg(argc, argv, "--user", 96));
  const int answer = static_cast<int>(arg(argc, argv, "--answer", 16));
  const int64_t block = arg(argc, argv, "--block", 256);
  const int threads = static_cast<int>(arg(argc, argv, "--threads", 2));
  const int off_every = static_cast<int>(std::max<int64_t>(1, arg(argc, argv, "--off-every", 1)));
  std::string state_file = "/tmp/k3-bench-prefix-state.bin";
  for (int i = 2; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--state-file") == 0) state_file = argv[i + 1];
  k3::set_num_threads(threads);
  omp_set_num_threads(threads);
  auto ck = k3::Checkpoint::open(argv[1]);
  k3::Model m(*ck);
  const int64_t n_vocab = m.config().vocab_size;
  k3::PrefixCacheOptions po;
  po.block_tokens = block;
  po.ram_bytes = 8ull << 30;
  k3::PrefixCache cache(m, k3::model_fingerprint(*ck, m), po);
  std::printf(
      "model %s | ISA %s | %d threads | block %lld tokens | KDA snapshot %.2f MiB, MLA block %.2f MiB, "
      "snapshot every %lld blocks\n",
      argv[1], k3::isa_name(k3::active_isa()), threads, static_cast<long long>(block),
      cache.snapshot_bytes() / 1048576.0, cache.block_mla_bytes() / 1048576.0,
      static_cast<long long>(cache.snapshot_every()));

  std::vector<int32_t> prompt = ids_of(system, 1, n_vocab);
  std::printf("%5s %7s %7s %12s %12s %8s\n", "turn", "prompt", "reused", "TTFT on ms", "TTFT off ms", "ratio");
  double last_on = 0, last_off = 0;
  k3::SequenceState last;
  for (int t = 0; t < turns; ++t) {
    const std::vector<int32_t> msg = ids_of(user, 100 + t, n_vocab);
    prompt.insert(prompt.end(), msg.begin(), msg.end());
    // cache on
    k3::SequenceState on = m.new_sequence();
    auto t0 = clk::now();
    int64_t reused = 0;
    k3::PrefixCache::Pin pin;
    std::vector<float> l = k3::prefill_cached(m, cache, on, prompt, 512, &pin, &reused);
    int32_t first = argmax(l);
    const double ttft_on = ms_since(t0);
    // cache off (the same prompt, recomputed)
    double ttft_off = 0;
    if ((t + 1) % off_every == 0 || t == 0 || t == turns - 1) {
      k3::SequenceState off = m.new_sequence();
      t0 = clk::now();
      std::vector<float> l2 = k3::prefill(m, off, prompt, 512);
      const int32_t first2 = argmax(l2);
      ttft_off = ms_since(t0);
      if (first != first2 || l != l2) std::printf("  (turn %d: logits differ between cache on and off!)\n", t);
      std::printf("%5d %7zu %7lld %12.1f %12.1f %7.2fx\n", t + 1, prompt.size(), static_cast<long long>(reused),
                  ttft_on, ttft_off, ttft_off / ttft_on);
    } else {
      std::printf("%5d %7zu %7lld %12.1f %12s %8s\n", t + 1, prompt.size(), static_cast<long long>(reused), ttft_on,
                  "-", "-");
    }
    last_on = ttft_on, last_off = ttft_off;
    // the answer: greedy, appended to the conversation
    std::vector<int32_t> ans{first};
    for (int i = 1; i < answer; ++i) {
      l = m.forward(on, std::span<const int32_t>(&ans.back(), 1), false);
      ans.push_back(argmax(l));
    }
    prompt.insert(prompt.end(), ans.begin(), ans.end());
    if (t == turns - 1) last = on;
  }
  std::printf("turn %d TTFT: %.1f ms with the cache, %.1f ms without (%.2fx)\n", turns, last_on, last_off,
              last_off / last_on);

  // Snapshot cost: one copy of every KDA layer's state (what store() does at a snapshot point).
  {
    std::vector<float> snap(cache.snapshot_bytes() / 4);
    std::vector<double> t;
    for (int r = 0; r < 5; ++r) {
      std::vector<float> copy;
      const auto t0 = clk::now();
      copy.assign(snap.begin(), snap.end());
      t.push_back(ms_since(t0));
    }
    std::sort(t.begin(), t.end());
    std::printf("KDA snapshot: %.2f MiB, copy %.2f ms (median of 5)\n", cache.snapshot_bytes() / 1048576.0, t[2]);
  }
  // Save / restore the whole sequence after the last turn.
  std::vector<double> ts, tr;
  for (int r = 0; r < 3; ++r) {
    auto t0 = clk::now();
    last.save(state_file);
    ts.push_back(ms_since(t0));
    t0 = clk::now();
    k3::SequenceState back = k3::SequenceState::load(state_file, m.config());
    tr.push_back(ms_since(t0));
    if (back.n_past() != last.n_past()) throw k3::Error("restore mismatch");
  }
  std::sort(ts.begin(), ts.end());
  std::sort(tr.begin(), tr.end());
  std::printf(
      "save/restore of the %lld-token sequence (%.2f MiB): save %.1f ms, restore %.1f ms (median of 3; "
      "K3 report AgentENV: 133 ms / 49 ms)\n",
      static_cast<long long>(last.n_past()), last.bytes() / 1048576.0, ts[1], tr[1]);
  std::filesystem::remove(state_file);
  const k3::PrefixCacheStats st = cache.stats();
  std::printf("cache: %llu lookups, %llu hits, %llu/%llu tokens reused, RAM %.1f MiB (%llu blocks, %llu snapshots)\n",
              static_cast<unsigned long long>(st.lookups), static_cast<unsigned long long>(st.hits),
              static_cast<unsigned long long>(st.tokens_reused), static_cast<unsigned long long>(st.tokens_looked_up),
              st.ram_bytes / 1048576.0, static_cast<unsigned long long>(st.ram_blocks),
              static_cast<unsigned long long>(st.ram_snapshots));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "k3_bench_prefix_cache: %s\n", e.what());
  return 1;
}
