// Experts streamed from SSD: decode tokens/s, the drive read rate while streaming and
// the expert cache's hit rate, beside a drive probe (O_DIRECT sequential and random reads of
// expert-sized records) measured in the same run, with the page cache dropped first.
//
//   k3_bench_expert_stream -m DIR [-n 12] [--warmup 2] [--budgets 0,0.25,0.5] [--io-threads 16]
//                          [--prefetch on,off] [--rounds 1] [--probe-records 64] [-t N] [--no-drop]
//                          [--json]
//
// DIR: a checkpoint larger than RAM, e.g. tools/reference/gen_bench_model.py --layers 3
// --experts 896 (2 MoE layers of 896 real-size experts, ~37 GB). Each budget is a fraction of all
// routed expert bytes (0 = no cache). Per budget: a fresh ExpertStore; untimed warm-up decode
// tokens (--warmup, plus as many as could fill the cache), then -n timed decode tokens.
// --prefetch lists the next-layer prefetch settings (ExpertStore::prefetch) to run per budget;
// --rounds repeats the whole list (budget x prefetch) so an A/B is interleaved. Columns: the drive
// rate counts every byte read (wasted prefetch reads too) over the wall time; "useful" leaves the
// wasted reads out; "prediction" is the share of the experts used that the prediction named;
// "cache hits" leaves out the hits on experts a prefetch read; "drive busy" is the share of the
// wall time with at least one read in flight.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/drive_probe.h"
#include "io/expert_store.h"
#include "kernels/threads.h"
#include "model/k3_model.h"
#include "tools/exec_env.h"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

int main(int argc, char** argv) {
  k3tools::exec_config({}, k3::Numerics::Exact, 0);  // K3_ISA / K3_NUMERICS / K3_MXFP4 / K3_KERNELS
  CLI::App app{"k3 expert streaming benchmark"};
  std::string dir;
  int n_gen = 12, warmup = 2, io_threads = 16, threads = 0;
  int64_t probe_records = 64;
  std::vector<double> budgets{0, 0.25, 0.5};
  std::vector<std::string> prefetch_modes{"on"};
  int rounds = 1;
  bool no_drop = false, json = false;
  app.add_option("-m,--model", dir, "checkpoint directory")->required();
  app.add_option("-n", n_gen, "timed decode tokens per budget")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", warmup, "untimed decode tokens per budget")->check(CLI::Range(0, 1000));
  app.add_option("--budgets", budgets, "expert cache budgets as fractions of all experts")->delimiter(',');
  app.add_option("--io-threads", io_threads, "reads in flight")->check(CLI::Range(1, 1024));
  app.add_option("--prefetch", prefetch_modes, "next-layer prefetch settings to run: on, off or both (on,off)")
      ->delimiter(',')
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--rounds", rounds, "repeat the budget x prefetch list this many times")->check(CLI::Range(1, 1000));
  app.add_option("--probe-records", probe_records, "records per drive-probe pattern")->check(CLI::Range(1, 1 << 20));
  app.add_option("-t,--threads", threads, "compute threads (0 = all)");
  app.add_flag("--no-drop", no_drop, "do not drop the page cache first");
  app.add_flag("--json", json, "JSON output");
  CLI11_PARSE(app, argc, argv);
  try {
    if (threads > 0) k3::set_num_threads(threads);
    const bool dropped = !no_drop && k3::drop_page_cache();
    auto ck = k3::Checkpoint::open(dir);
    const auto& c = ck->config();
    std::vector<std::string> shards;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().extension() == ".safetensors") shards.push_back(e.path().string());
    k3::DriveProbeOptions po;
    po.records = probe_records;
    po.in_flight = io_threads;
    const auto seq = k3::probe_drive(shards, po);
    po.random = true;
    const auto rnd = k3::probe_drive(shards, po);
    nlohmann::json out = {{"model", dir},
                          {"page_cache_dropped", dropped},
                          {"probe",
                           {{"record_bytes", po.record_bytes},
                            {"in_flight", io_threads},
                            {"sequential_gbs", seq.gbs},
                            {"random_gbs", rnd.gbs},
                            {"direct", seq.direct && rnd.direct}}}};
    if (!json)
      std::printf(
          "model %s: %d MoE layers x %d experts (top-%d); page cache %s\n"
          "drive probe (%s, %d in flight, %.2f MB records): sequential %.2f GB/s, random %.2f GB/s\n\n"
          "| cache | prefetch | tokens/s | s/token | hit rate | cache hits | prediction | GB read/token | wasted "
          "GB/token | drive GB/s | %% of random probe | useful %% | drive busy | wait s/token | I/O |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
          dir.c_str(), c.n_moe_layers(), c.num_experts, c.num_experts_per_token, dropped ? "dropped" : "NOT dropped",
          seq.direct ? "O_DIRECT" : "buffered", io_threads, static_cast<double>(po.record_bytes) / 1e6, seq.gbs,
          rnd.gbs);
    uint32_t rs = 12345;
    auto next_id = [&] {
      rs = rs * 1664525u + 1013904223u;
      return static_cast<int32_t>((rs >> 8) % static_cast<uint32_t>(std::max(2, c.vocab_size - 256)));
    };
    for (int round = 0; round < rounds; ++round)
    for (double f : budgets)
    for (const std::string& pf : prefetch_modes) {
      k3::ExpertStoreOptions so;
      so.io_threads = io_threads;
      so.prefetch = pf == "on";
      auto probe_store = std::make_unique<k3::ExpertStore>(*ck, so);
      const uint64_t total = probe_store->total_expert_bytes();
      probe_store.reset();
      so.cache_bytes = static_cast<uint64_t>(f * static_cast<double>(total));
      auto store = std::make_shared<k3::ExpertStore>(*ck, so);
      k3::ModelOptions mo;
      mo.expert_store = store;
      const k3::Model model(*ck, mo);
      auto s = model.new_sequence();
      // Warm-up until the cache could be full (a token misses at most top_k x n_moe experts), so
      // the timed tokens see the steady-state hit rate.
      const double per_token =
          static_cast<double>(total) / static_cast<double>(c.num_experts) * c.num_experts_per_token;
      const int fill = static_cast<int>(std::ceil(static_cast<double>(so.cache_bytes) / per_token));
      const int n_warm = std::max(warmup, fill + warmup);
      for (int i = 0; i < n_warm; ++i) {
        const int32_t tok = next_id();
        model.forward(s, std::span<const int32_t>(&tok, 1), false);
      }
      store->reset_stats();
      const auto t0 = Clock::now();
      for (int i = 0; i < n_gen; ++i) {
        const int32_t tok = next_id();
        model.forward(s, std::span<const int32_t>(&tok, 1), false);
      }
      const double secs = since(t0);
      const auto st = store->stats();
      const double acquired = static_cast<double>(st.hits + st.misses);
      const double hit = acquired > 0 ? static_cast<double>(st.hits) / acquired : 0;
      const double gbs = static_cast<double>(st.bytes_read) / secs / 1e9;
      const double useful_gbs = static_cast<double>(st.bytes_read - std::min(st.bytes_read, st.prefetch_wasted_bytes)) / secs / 1e9;
      const double cache_hit = acquired > 0 ? static_cast<double>(st.hits - st.prefetch_used) / acquired : 0;
      const double predicted = st.predicted > 0 ? static_cast<double>(st.predicted_right) / static_cast<double>(st.predicted) : 0;
      const double tps = n_gen / secs;
      out["runs"].push_back({{"round", round},
                             {"prefetch", pf},
                             {"prediction_right", predicted},
                             {"cache_hit_rate", cache_hit},
                             {"prefetched", st.prefetched},
                             {"prefetch_used", st.prefetch_used},
                             {"prefetch_wasted", st.prefetch_wasted},
                             {"prefetch_wasted_bytes", st.prefetch_wasted_bytes},
                             {"prefetch_cancelled", st.prefetch_cancelled},
                             {"useful_gbs", useful_gbs},
                             {"busy_seconds", st.busy_seconds},
                             {"cache_fraction", f},
                             {"cache_bytes", so.cache_bytes},
                             {"tokens", n_gen},
                             {"warmup", n_warm},
                             {"seconds", secs},
                             {"tokens_per_s", tps},
                             {"hit_rate", hit},
                             {"bytes_read", st.bytes_read},
                             {"bytes_read_per_token", st.bytes_read / n_gen},
                             {"reads", st.reads},
                             {"drive_gbs", gbs},
                             {"fraction_of_random_probe", gbs / rnd.gbs},
                             {"wait_seconds", st.wait_seconds},
                             {"read_seconds_sum", st.read_seconds},
                             {"io_mode", store->io_mode()}});
      if (!json)
        std::printf("| %.0f%% (%.1f GB) | %s | %.3f | %.2f | %.1f%% | %.1f%% | %s | %.3f | %.3f | %.2f | %.0f%% | %.0f%% | %.0f%% | %.2f | %s |\n",
                    100 * f, static_cast<double>(so.cache_bytes) / 1e9, pf.c_str(), tps, 1 / tps, 100 * hit,
                    100 * cache_hit, so.prefetch ? (std::to_string(static_cast<int>(std::lround(100 * predicted))) + "%").c_str() : "-",
                    static_cast<double>(st.bytes_read) / n_gen / 1e9,
                    static_cast<double>(st.prefetch_wasted_bytes) / n_gen / 1e9, gbs, 100 * gbs / rnd.gbs,
                    100 * useful_gbs / rnd.gbs, 100 * st.busy_seconds / secs, st.wait_seconds / n_gen,
                    store->io_mode().c_str());
      std::fflush(stdout);
    }
    if (json) std::printf("%s\n", out.dump(2).c_str());
  } catch (const k3::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
