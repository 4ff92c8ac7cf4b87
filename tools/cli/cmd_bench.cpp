// `k3 bench`: llama-bench-style speed of a checkpoint: prefill tokens/s (pp<P>) and
// decode tokens/s (tg<N>), medians of several runs, the bytes of weights one decoded token reads,
// that traffic as GB/s and as a fraction of the machine's read bandwidth (built-in streaming probe,
// kernels/read_bandwidth.h), and the decode speed extrapolated to the full K3 (93 layers, 896
// experts, vocab 163840) at the same effective bandwidth (algorithms.md §8: decode is bound by
// weight bytes / bandwidth).
//
//   k3 bench -m DIR [-t N] [-p 512] [-n 128] [-r 5] [--json] [--probe-mb 1024] [--profile]
//            [--pin] [--stream-experts | --expert-cache-gb X] [--io-threads 16] [--trunk-memory map|copy]
// The yardstick: after each timed decode run, one pass of the read probe over the
// checkpoint's own mapped weights (the very pages decode reads, same threads); "% of probe" is
// the median over runs of decode GB/s / that pass's GB/s, so a machine that slows down between
// runs moves both alike (--trunk-memory copy: the trunk's copy in 2 MiB pages, and the mapped
// experts). Anonymous-buffer probes (4 KiB and 2 MiB pages) are printed beside it.
// --profile adds one decode run with per-op timers (kernels/op_profile.h): ms and GB/s per op.
// (streamed experts: the ExpertStore's hit rate and bytes read are printed on stderr; the
// drive-bound larger-than-RAM benchmark is bench/expert_stream.cpp)
//
// Bandwidth-bound model for this: tools/reference/gen_bench_model.py --out /tmp/k3-bench.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "ranks.h"
#include "core/error.h"
#include "flag_checks.h"
#include "exec_flags.h"
#include "io/checkpoint.h"
#include "io/expert_store.h"
#include "io/tensor_table.h"
#include "kernels/dispatch.h"
#include "kernels/op_profile.h"
#include "kernels/ops.h"
#include "kernels/read_bandwidth.h"
#include "kernels/threads.h"
#include "cache_type_flag.h"
#include "omp_wait.h"
#include "model/k3_model.h"
#include "runtime/nonfinite.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string model;
  int threads = 0, prompt = 512, gen = 128, reps = 5, probe_mb = 1024;
  bool json = false;
  k3cli::NumericsFlag numerics;  ///< default k3::default_numerics()
  k3cli::CacheTypeFlag cache_type;  ///< --cache-type: the MLA cache rows
  std::vector<int64_t> depths;   ///< -d: context tokens filled (untimed) before pp and tg; empty: the standard run
  bool profile = false;          ///< one more decode run with per-op timers (kernels/op_profile.h)
  bool pin = false;              ///< probes with workers pinned to one CPU each
  bool stream_experts = false;   ///< experts read from the shards (io/expert_store.h)
  double expert_cache_gb = 0;
  int io_threads = 16;
  std::string trunk_memory = "map";  ///< --trunk-memory (io/memory_plan.h TrunkMemory)
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// ---- weight bytes per decoded token -------------------------------------------------------

/// What a checkpoint tensor is to the byte estimates and the page-in, from the tensor table
/// (Other: a vision tensor).
enum class BenchTensor { Embedding, Expert, Dense, Other };
BenchTensor bench_tensor(const k3::Checkpoint& ck, const k3::TensorView& t) {
  if (k3::is_vision_tensor_name(t.name)) return BenchTensor::Other;
  const auto m = k3::match_tensor_name(ck.config(), k3::text_tensor_name(t.name));
  if (m && m->role == k3::TensorRole::EmbedTokens) return BenchTensor::Embedding;
  if (m && k3::tensor_kind(m->role).group == k3::TensorGroup::Expert) return BenchTensor::Expert;
  return BenchTensor::Dense;
}

/// From the checkpoint itself: every text tensor once, the embedding as one row, routed experts
/// as top_k / num_experts of each MoE layer's expert bytes.
double decode_bytes_from_checkpoint(const k3::Checkpoint& ck) {
  const k3::ModelConfig& c = ck.config();
  double dense = 0, experts = 0;
  for (const k3::TensorView& t : ck.tensors()) {
    const BenchTensor kind = bench_tensor(ck, t);
    if (kind == BenchTensor::Other) continue;  // vision
    if (kind == BenchTensor::Embedding) dense += static_cast<double>(t.nbytes) / std::max<int64_t>(1, t.dim(0));
    else if (kind == BenchTensor::Expert) experts += static_cast<double>(t.nbytes);
    else dense += static_cast<double>(t.nbytes);
  }
  return dense + experts * c.num_experts_per_token / std::max(1, c.num_experts);
}

/// The same from the config's widths (k3-architecture.md §2), for any layer/expert/vocab count.
double decode_bytes_formula(const k3::ModelConfig& c, int n_kda, int n_mla, int n_dense, int n_moe, int n_experts,
                            int64_t vocab) {
  const double D = c.hidden_size, H = c.kda_num_heads, dk = c.kda_head_dim, C = H * dk, K = c.short_conv_kernel_size;
  const double kda =
      2 * (3 * C * D + dk * D + C * dk + H * D + C * D + D * C) + 4 * (3 * C * K + C + std::max(128.0, H) + dk);
  const double Hm = c.num_attention_heads, qr = c.q_lora_rank, kvr = c.kv_lora_rank, dn = c.qk_nope_head_dim,
               dr = c.qk_rope_head_dim, dv = c.v_head_dim;
  const double mla =
      2 * (qr * D + qr + Hm * (dn + dr) * qr + (kvr + dr) * D + kvr + Hm * (dn + dv) * kvr + Hm * dv * D + D * Hm * dv);
  const double dense = 2 * 3 * static_cast<double>(c.intermediate_size) * D;
  const double E = n_experts, Lat = c.routed_expert_hidden_size, Im = c.moe_intermediate_size, S = c.num_shared_experts;
  const double moe_fixed = 2 * (E * D + Lat * D + Lat + D * Lat + 3 * S * Im * D) + 4 * E;
  const double routed = c.num_experts_per_token * 3 * Im * Lat * 17 / 32;
  const double per_layer = 2 * 6 * D;
  const double globals = 2 * static_cast<double>(vocab) * D + 2 * D + 2 * 3 * D;
  return n_kda * kda + n_mla * mla + n_dense * dense + n_moe * (moe_fixed + routed) + (n_kda + n_mla) * per_layer +
         globals;
}

/// The mapped bytes of every text tensor but the embedding (read as a row per token, not as a
/// stream), in checkpoint order: the memory decode streams, for the weights probe. With
/// streamed experts the routed experts are not mapped and are left out; with the trunk copied
/// (`skip_trunk`) the trunk's mapped bytes are not read and are left out.
std::vector<k3::MemRegion> weight_regions(const k3::Checkpoint& ck, bool skip_experts, bool skip_trunk) {
  std::vector<k3::MemRegion> r;
  for (const k3::TensorView& t : ck.tensors()) {
    const BenchTensor kind = bench_tensor(ck, t);
    if (kind == BenchTensor::Other || kind == BenchTensor::Embedding) continue;
    if (skip_experts && kind == BenchTensor::Expert) continue;
    if (skip_trunk && kind == BenchTensor::Dense) continue;
    if (t.data != nullptr && t.nbytes > 0) r.push_back({t.data, t.nbytes});
  }
  return r;
}

nlohmann::json probe_json(const k3::ReadBandwidth& b) {
  return {{"median_gbs", b.median_gbs}, {"best_gbs", b.best_gbs},   {"worst_gbs", b.worst_gbs},
          {"spread", b.spread},         {"cpu_share", b.cpu_share}, {"timed_page_faults", b.timed_page_faults},
          {"bytes", b.bytes},           {"threads", b.threads},     {"huge_pages", b.huge_pages},
          {"pinned", b.pinned},         {"runs_gbs", b.run_gbs}};
}

std::string probe_line(const k3::ReadBandwidth& b) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%.2f GB/s median of %zu (%.2f..%.2f, spread %.0f%%), CPU share %.2f, %lld page faults", b.median_gbs,
                b.run_gbs.size(), b.worst_gbs, b.best_gbs, 100 * b.spread, b.cpu_share,
                static_cast<long long>(b.timed_page_faults));
  return buf;
}

/// Touches every page of every tensor (parallel) so timed runs read RAM, not the disk; with
/// streamed experts, every tensor but the routed experts; with the trunk copied, not the trunk's
/// mapped bytes (the model reads its copy; touching them would read them back from the drive).
void page_in(const k3::Checkpoint& ck, bool skip_experts, bool skip_trunk) {
  const auto& ts = ck.tensors();
  k3::parallel_for(static_cast<int64_t>(ts.size()), 1, [&](int64_t b, int64_t e) {
    volatile uint8_t sink = 0;
    for (int64_t i = b; i < e; ++i) {
      const BenchTensor kind = bench_tensor(ck, ts[i]);
      if (skip_experts && kind == BenchTensor::Expert) continue;
      if (skip_trunk && kind == BenchTensor::Dense) continue;
      for (uint64_t o = 0; o < ts[i].nbytes; o += 4096) sink = sink ^ ts[i].data[o];
    }
  });
}

// -d DEPTH[,DEPTH...] (llama-bench's depth): per depth, a state is filled with DEPTH
// pseudo-random ids (untimed), then pp (o.prompt tokens) and tg (o.gen single-token steps) run
// on forks of it, o.reps times each (medians). The attention reads the whole context, so these
// are the speeds at that depth. Prints a table, or JSON {"depths": [...]} with --json.
void run_depths(const Options& o, k3::Model& model, const std::function<int32_t()>& next_id, const std::string& head) {
  nlohmann::json rows = nlohmann::json::array();
  if (!o.json) {
    std::printf("%s", head.c_str());
    std::printf("| depth | pp%d t/s | tg%d t/s | fill s | state MiB |\n|---|---|---|---|---|\n", o.prompt, o.gen);
  }
  for (int64_t depth : o.depths) {
    std::vector<int32_t> fill(static_cast<size_t>(depth)), prompt(static_cast<size_t>(o.prompt));
    for (auto& id : fill) id = next_id();
    for (auto& id : prompt) id = next_id();
    auto base = model.new_sequence();
    base.reserve(depth + std::max<int64_t>(o.prompt, o.gen) + 1);
    const auto tf = Clock::now();
    if (depth > 0) model.forward(base, fill, false);
    const double fill_s = seconds_since(tf);
    std::vector<double> pp, tg;
    for (int r = 0; r <= o.reps; ++r) {  // r == 0: untimed warm-up
      auto s = base.fork();
      const auto t0 = Clock::now();
      const std::vector<float> logits = model.forward(s, prompt, false);
      if (r > 0) pp.push_back(seconds_since(t0));
      if (k3::first_nonfinite(logits) >= 0)
        throw k3::Error("bench: the prefill logits at depth " + std::to_string(depth) + " are not finite");
    }
    for (int r = 0; r <= o.reps; ++r) {
      auto s = base.fork();
      int32_t tok = next_id();
      std::vector<float> last;
      const auto t0 = Clock::now();
      for (int i = 0; i < o.gen; ++i) {
        last = model.forward(s, std::span<const int32_t>(&tok, 1), false);
        tok = next_id();
      }
      if (r > 0) tg.push_back(seconds_since(t0));
      if (k3::first_nonfinite(last) >= 0)
        throw k3::Error("bench: the decode logits at depth " + std::to_string(depth) + " are not finite");
    }
    const double pp_tps = o.prompt / median(pp), tg_tps = o.gen / median(tg);
    const double mib = static_cast<double>(base.bytes()) / 1048576.0;
    if (o.json)
      rows.push_back({{"depth", depth},
                      {"fill_s", fill_s},
                      {"state_bytes", base.bytes()},
                      {"pp", {{"n_prompt", o.prompt}, {"seconds", pp}, {"tokens_per_s", pp_tps}}},
                      {"tg", {{"n_gen", o.gen}, {"seconds", tg}, {"tokens_per_s", tg_tps}}}});
    else {
      std::printf("| %lld | %.2f | %.2f | %.1f | %.1f |\n", static_cast<long long>(depth), pp_tps, tg_tps, fill_s, mib);
      std::fflush(stdout);
    }
  }
  if (o.json) {
    nlohmann::json j = {{"model", o.model},
                        {"threads", k3::num_threads()},
                        {"cache_type", o.cache_type.name},
                        {"isa", k3::isa_name(*model.options().exec.isa)},
                        {"depths", rows}};
    std::printf("%s\n", j.dump(2).c_str());
  }
}

void run(const Options& o) {
  // Under N ranks every rank runs the same measurements on its shard (the forwards are
  // collective) and rank 0 prints; the communicator's counters of rank 0 per prefill and per
  // decoded token are added (collectives, bytes sent and received, seconds inside them).
  k3::Comm& comm = *k3cli::world();
  if (o.threads > 0) k3::set_num_threads(o.threads);
  const int nt = k3::num_threads();
  auto ck = k3::Checkpoint::open(o.model);
  k3::ModelOptions mo;
  mo.exec = o.numerics.exec(k3::default_numerics(), o.threads);
  mo.comm = k3cli::world();
  mo.mla_cache = o.cache_type.type();
  const k3::Numerics numerics = *mo.exec.numerics;
  std::shared_ptr<k3::ExpertStore> store;
  if (o.stream_experts) {
    k3::ExpertStoreOptions so;
    so.cache_bytes = static_cast<uint64_t>(o.expert_cache_gb * 1e9);
    so.io_threads = o.io_threads;
    store = std::make_shared<k3::ExpertStore>(*ck, so);
    mo.expert_store = store;
  }
  const auto tm = k3::trunk_memory_from_name(o.trunk_memory);
  if (!tm) throw k3::Error("--trunk-memory: expected map or copy, found '" + o.trunk_memory + "'");
  mo.trunk_memory = *tm;
  const bool copied = *tm == k3::TrunkMemory::Copy;
  k3::Model model(*ck, mo);
  k3cli::check_ranks(*ck, model);
  const k3::ModelConfig& c = model.config();
  const k3::TrunkCopyStats& tc = model.trunk_copy();
  const auto tp0 = Clock::now();
  page_in(*ck, o.stream_experts, copied);
  const double t_page = seconds_since(tp0);

  // deterministic pseudo-random token ids (avoid the special ids at the top of the vocab)
  const int32_t id_range = std::max(2, c.vocab_size - 256);
  uint32_t rs = 12345;
  auto next_id = [&] {
    rs = rs * 1664525u + 1013904223u;
    return static_cast<int32_t>((rs >> 8) % static_cast<uint32_t>(id_range));
  };
  if (!o.depths.empty()) {
    char head[256];
    std::snprintf(head, sizeof head, "model %s, %d threads, ISA %s, --cache-type %s; medians of %d runs\n\n",
                  o.model.c_str(), nt, k3::isa_name(*model.options().exec.isa), o.cache_type.name.c_str(), o.reps);
    run_depths(o, model, next_id, head);
    return;
  }
  std::vector<int32_t> prompt(static_cast<size_t>(o.prompt));
  for (auto& id : prompt) id = next_id();

  // prefill: one forward over the whole prompt from an empty state
  std::vector<double> pp;
  {  // warm-up (as llama-bench, untimed): whole prefill runs until 0.5 s have passed (at least 1,
     // at most 8), so the timed runs pay neither first-touch page faults of the activation buffers
     // nor the wake-up of idle cores (measured on the 2-vCPU VMs: the first 2-3 runs with 2
     // threads at ~55% of the steady speed). Under N ranks rank 0's clock decides, broadcast
     // each run: every rank makes the same number of forwards (the same collectives).
    const auto tw = Clock::now();
    auto more = [&](int i) {
      uint8_t go = i < 8 && (i == 0 || seconds_since(tw) < 0.5) ? 1 : 0;
      model.comm().broadcast(&go, 1, 0);
      return go == 1;
    };
    for (int i = 0; more(i); ++i) {
      auto s = model.new_sequence();
      try {
        model.forward(s, prompt, false);
      } catch (const k3::Error& e) {
        throw k3::Error("bench: " + k3::explain_forward_error(e, model, prompt));
      }
    }
  }
  comm.reset_counters();
  for (int r = 0; r < o.reps; ++r) {
    auto s = model.new_sequence();
    const auto t0 = Clock::now();
    const std::vector<float> logits = model.forward(s, prompt, false);
    pp.push_back(seconds_since(t0));
    // a speed of NaN logits is no result: refuse it, naming the first non-finite intermediate
    const int64_t bad = k3::first_nonfinite(logits);
    if (bad >= 0)
      throw k3::Error("bench: the prefill logits (last of " + std::to_string(o.prompt) +
                      " prompt tokens) are not finite: logit of id " + std::to_string(bad) + " = " +
                      std::to_string(logits[static_cast<size_t>(bad)]) + "; " + k3::locate_nonfinite(model, prompt));
  }
  const k3::CommCounters pp_comm = comm.counters();
  // decode: n single-token steps from an empty state (llama-bench tg), each timed run followed by
  // one pass of the weights probe (the first pass after the warm-up run is untimed)
  const double bytes_tok = decode_bytes_from_checkpoint(*ck);
  std::vector<k3::MemRegion> regions = weight_regions(*ck, o.stream_experts, copied);
  if (copied && !tc.memory.empty()) regions.insert(regions.begin(), k3::MemRegion{tc.memory.data(), tc.memory.size()});
  std::vector<double> tg, wprobe, ratio;
  auto decode_run = [&] {
    auto s = model.new_sequence();
    int32_t tok = next_id();
    const auto t0 = Clock::now();
    std::vector<float> last;
    for (int i = 0; i < o.gen; ++i) {
      last = model.forward(s, std::span<const int32_t>(&tok, 1), false);
      tok = next_id();
    }
    const double t = seconds_since(t0);
    if (k3::first_nonfinite(last) >= 0)
      throw k3::Error("bench: the logits of decode step " + std::to_string(o.gen) + " are not finite");
    return t;
  };
  k3::CommCounters tg_comm;
  for (int r = 0; r <= o.reps; ++r) {  // r == 0 is the warm-up
    if (r == 1) comm.reset_counters();
    const double t = decode_run();
    if (r == o.reps) tg_comm = comm.counters();
    const k3::ReadBandwidth p = k3::measure_region_read_bandwidth(regions, 1, r == 0, o.pin);
    if (r == 0) continue;
    tg.push_back(t);
    wprobe.push_back(p.median_gbs);
    ratio.push_back(bytes_tok * o.gen / t / 1e9 / p.median_gbs);
  }
  // per-op breakdown: one more decode run with the timers on (the timed runs above ran without)
  double prof_s = 0;
  std::vector<k3::prof::OpStat> ops;
  if (o.profile) {
    k3::prof::reset();
    k3::prof::set_enabled(true);
    prof_s = decode_run();
    k3::prof::set_enabled(false);
    ops = k3::prof::snapshot();
  }
  // the weights probe once more with its own passes (spread, CPU share), then buffer probes
  const k3::ReadBandwidth wbw = k3::measure_region_read_bandwidth(regions, 5, false, o.pin);
  k3::ReadProbeOptions po;
  po.bytes = static_cast<uint64_t>(o.probe_mb) << 20;
  po.pin_threads = o.pin;
  po.huge_pages = false;
  const k3::ReadBandwidth bw = k3::measure_read_bandwidth(po);
  po.huge_pages = true;
  const k3::ReadBandwidth bw_huge = k3::measure_read_bandwidth(po);
  if (store) {  // counters over the whole run (warm-up, prefill, decode)
    const auto st = store->stats();
    const double n = static_cast<double>(st.hits + st.misses);
    std::fprintf(stderr, "experts streamed (%s, cache %.2f GB): hit rate %.1f%%, %.3f GB read in %llu reads\n",
                 store->io_mode().c_str(), o.expert_cache_gb, n > 0 ? 100.0 * static_cast<double>(st.hits) / n : 0.0,
                 static_cast<double>(st.bytes_read) / 1e9, static_cast<unsigned long long>(st.reads));
  }

  const char* kernels = k3::model_kernels_name(*model.options().exec.kernels);
  const char* isa = k3::isa_name(*model.options().exec.isa);
  const std::string mxfp4 =
      std::string(k3::mxfp4_path_name(*model.options().exec.mxfp4)) + ", numerics " + k3::numerics_name(numerics);
  const double pp_s = median(pp), tg_s = median(tg);
  const double pp_tps = o.prompt / pp_s, tg_tps = o.gen / tg_s;
  const double bytes_formula =
      decode_bytes_formula(c, c.n_kda_layers(), c.n_mla_layers(), c.num_hidden_layers - c.n_moe_layers(),
                           c.n_moe_layers(), c.num_experts, c.vocab_size);
  const double gbs = bytes_tok * tg_tps / 1e9;
  const double frac = median(ratio);            // of the weights probe, pass by pass
  const double frac_buf = gbs / bw.median_gbs;  // of the 4 KiB-page buffer probe
  // full K3: 69 KDA + 24 MLA layers, layer 0 dense, 92 MoE layers of 896 experts, vocab 163840
  const double bytes_k3 = decode_bytes_formula(c, 69, 24, 1, 92, 896, 163840);
  const double k3_tps = gbs * 1e9 / bytes_k3;
  const double probe_gbs = median(wprobe);
  const double k3_tps_probe = probe_gbs * 1e9 / bytes_k3;

  // rank 0's traffic per prefill of o.prompt tokens and per decoded token (timed runs only)
  const double pp_runs = o.reps, tg_tokens = static_cast<double>(o.reps) * o.gen;
  auto comm_json = [&](const k3::CommCounters& k, double per) {
    return nlohmann::json{{"collectives", static_cast<double>(k.collectives) / per},
                          {"bytes_sent", static_cast<double>(k.bytes_sent) / per},
                          {"bytes_received", static_cast<double>(k.bytes_received) / per},
                          {"seconds_in_collectives", k.seconds / per}};
  };
  if (o.json) {
    nlohmann::json j = {{"model", o.model},
                        {"isa", isa},
                        {"threads", nt},
                        {"omp_wait", k3cli::omp_wait_policy()},
                        {"kernels", kernels},
                        {"mxfp4", mxfp4},
                        {"pp", {{"n_prompt", o.prompt}, {"seconds", pp}, {"median_s", pp_s}, {"tokens_per_s", pp_tps}}},
                        {"tg", {{"n_gen", o.gen}, {"seconds", tg}, {"median_s", tg_s}, {"tokens_per_s", tg_tps}}},
                        {"decode_weight_bytes_per_token", bytes_tok},
                        {"decode_weight_bytes_per_token_formula", bytes_formula},
                        {"decode_read_gbs", gbs},
                        {"probe", probe_json(bw)},
                        {"probe_huge_pages", probe_json(bw_huge)},
                        {"probe_weights", probe_json(wbw)},
                        {"probe_weights_after_each_run_gbs", wprobe},
                        {"fraction_of_probe", frac},
                        {"fraction_of_buffer_probe", frac_buf},
                        {"prefill_vs_decode_per_token", pp_tps / tg_tps},
                        {"k3_full",
                         {{"decode_weight_bytes_per_token", bytes_k3},
                          {"tokens_per_s_at_measured_gbs", k3_tps},
                          {"tokens_per_s_at_probe_gbs", k3_tps_probe}}},
                        {"page_in_s", t_page},
                        {"trunk_memory",
                         {{"mode", o.trunk_memory},
                          {"matrices", tc.matrices},
                          {"bytes", tc.bytes},
                          {"huge_page_bytes", tc.huge_bytes},
                          {"paged_out_bytes", tc.paged_out},
                          {"seconds", tc.seconds}}}};
    if (comm.size() > 1) {
      const k3::ModelShard& sh = model.shard();
      j["ranks"] = {{"n", comm.size()},
                    {"transport", comm.transport()},
                    {"rank0_weight_bytes", sh.weight_bytes()},
                    {"rank0_per_prefill", comm_json(pp_comm, pp_runs)},
                    {"rank0_per_decode_token", comm_json(tg_comm, tg_tokens)}};
    }
    if (o.profile) {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& s : ops)
        a.push_back({{"op", s.name}, {"calls", s.calls}, {"seconds", s.seconds}, {"bytes", s.bytes}});
      j["decode_profile"] = {{"n_gen", o.gen}, {"seconds", prof_s}, {"ops", a}};
    }
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("model %s: %d layers (%d KDA, %d MLA, %d MoE of %d experts, top-%d), vocab %d\n", o.model.c_str(),
              c.num_hidden_layers, c.n_kda_layers(), c.n_mla_layers(), c.n_moe_layers(), c.num_experts,
              c.num_experts_per_token, c.vocab_size);
  std::printf("kernels %s, ISA %s, MXFP4 %s, %d threads (%s); page-in %.1f s; medians of %d runs\n", kernels, isa,
              mxfp4.c_str(), nt, k3cli::omp_wait_policy().c_str(), t_page, o.reps);
  if (copied)
    std::printf("trunk memory: copy (%lld matrices, %.2f GB, %.2f GB of it in 2 MiB pages, %.2f GB of the mapping "
                "advised out of the page cache, %.1f s)\n",
                static_cast<long long>(tc.matrices), tc.bytes / 1e9, tc.huge_bytes / 1e9, tc.paged_out / 1e9,
                tc.seconds);
  else
    std::printf("trunk memory: map (the checkpoint's page-cache pages)\n");
  std::printf("\n");
  std::printf("| test | t/s | ms/token | weight GB/token | read GB/s | %% of probe |\n|---|---|---|---|---|---|\n");
  std::printf("| pp%d | %.2f | %.2f | | | |\n", o.prompt, pp_tps, 1e3 / pp_tps);
  std::printf("| tg%d | %.3f | %.1f | %.3f | %.2f | %.0f%% |\n\n", o.gen, tg_tps, 1e3 / tg_tps, bytes_tok / 1e9, gbs,
              100 * frac);
  std::printf("%% of probe: decode GB/s over the weights-probe pass right after each run, median of %d runs\n", o.reps);
  std::printf("read probes (%d threads%s):\n", bw.threads, bw.pinned ? ", pinned" : "");
  std::printf(
      "  weights (%.2f GB, the memory decode reads, as it reads it): %.2f GB/s median of the passes "
      "after each run; alone: %s\n",
      wbw.bytes / 1e9, probe_gbs, probe_line(wbw).c_str());
  std::printf("  buffer %.0f MiB, 4 KiB pages: %s (decode: %.0f%% of it)\n", bw.bytes / 1048576.0,
              probe_line(bw).c_str(), 100 * frac_buf);
  std::printf("  buffer %.0f MiB, 2 MiB pages: %s\n", bw_huge.bytes / 1048576.0, probe_line(bw_huge).c_str());
  std::printf("decode weight bytes/token: %.3f GB from the checkpoint, %.3f GB from the widths\n", bytes_tok / 1e9,
              bytes_formula / 1e9);
  if (comm.size() > 1) {
    auto line = [](const char* what, const k3::CommCounters& k, double per) {
      std::printf("  %s: %.1f collectives, %.3f MB sent, %.3f MB received, %.3f ms in them\n", what,
                  static_cast<double>(k.collectives) / per, static_cast<double>(k.bytes_sent) / per / 1e6,
                  static_cast<double>(k.bytes_received) / per / 1e6, 1e3 * k.seconds / per);
    };
    std::printf("ranks: %d over %s; rank 0 holds %.3f GB of weights; rank 0's traffic:\n", comm.size(),
                comm.transport().c_str(), static_cast<double>(model.shard().weight_bytes()) / 1e9);
    line("per prefill", pp_comm, pp_runs);
    line("per decoded token", tg_comm, tg_tokens);
  }
  std::printf("prefill per token is %.1fx faster than decode per token\n", pp_tps / tg_tps);
  // The extrapolation keeps this model's layer widths and takes K3's depth and expert count, so
  // it is the full-K3 figure only for a model with K3's widths (tools/reference/gen_bench_model.py).
  const bool k3_widths = c.hidden_size == 7168 && c.kda_num_heads == 96 && c.kda_head_dim == 128 &&
                         c.moe_intermediate_size == 3072 && c.routed_expert_hidden_size == 3584;
  std::printf(
      "%s (%.1f GB of weights per decoded token): %.3f t/s at the measured %.2f GB/s, "
      "%.3f t/s at the probe's %.2f GB/s%s\n",
      k3_widths ? "full K3" : "this model's widths at K3's depth (93 layers, 896 experts)", bytes_k3 / 1e9, k3_tps, gbs,
      k3_tps_probe, probe_gbs,
      k3_widths ? " (needs the 1.56 TB model in RAM)" : "; not the full-K3 figure: widths differ from K3's");
  if (!o.profile) return;
  std::printf(
      "\ndecode per op (one more tg%d run with timers, %.1f ms/token; wall time outside "
      "parallel regions; GB/s = weight bytes / time):\n\n| op | calls/token | ms/token | MB/token | GB/s | %% of decode |\n|---|---|---|---|---|---|\n",
      o.gen, 1e3 * prof_s / o.gen);
  double timed = 0;
  for (const auto& s : ops) {
    timed += s.seconds;
    char gb[32] = "";
    if (s.bytes > 0 && s.seconds > 0) std::snprintf(gb, sizeof gb, "%.1f", s.bytes / s.seconds / 1e9);
    std::printf("| %s | %.0f | %.2f | %.1f | %s | %.1f%% |\n", s.name.c_str(), static_cast<double>(s.calls) / o.gen,
                1e3 * s.seconds / o.gen, s.bytes / 1e6 / o.gen, gb, 100 * s.seconds / prof_s);
  }
  std::printf("| (rest: norms, attention core, routing, glue) | | %.2f | | | %.1f%% |\n",
              1e3 * (prof_s - timed) / o.gen, 100 * (prof_s - timed) / prof_s);
}

const k3cli::Registrar kReg(
    "bench", "llama-bench-style prefill/decode speed, weight bytes per token vs read bandwidth", [](CLI::App* sub) {
      auto o = std::make_shared<Options>();
      sub->add_option("-m,--model", o->model, "checkpoint directory")->required();
      sub->add_option("-t,--threads", o->threads, "worker threads (0 = all hardware threads)")
          ->capture_default_str()
          ->check(k3cli::IntRange(0, 1 << 20));
      sub->add_option("-p,--n-prompt", o->prompt, "prompt tokens of the prefill test")
          ->capture_default_str()
          ->check(k3cli::IntRange(1, INT32_MAX));
      sub->add_option("-n,--n-gen", o->gen, "decoded tokens of the decode test")
          ->capture_default_str()
          ->check(k3cli::IntRange(1, INT32_MAX));
      sub->add_option("-r,--repetitions", o->reps, "runs per test; the median is reported")
          ->capture_default_str()
          ->check(k3cli::IntRange(1, 1000000));
      sub->add_option("--probe-mb", o->probe_mb, "read-bandwidth probe buffer in MiB")
          ->capture_default_str()
          ->check(k3cli::IntRange(1, 1 << 20));
      sub->add_option("-d,--depth", o->depths,
                      "context depths (llama-bench's -d): per depth, DEPTH tokens are prefilled untimed, then pp and "
                      "tg run on top of them (several: 1024,8192); replaces the standard run and its probes")
          ->delimiter(',')
          ->check(CLI::Range(int64_t{0}, int64_t{1} << 31));
      sub->add_flag("--json", o->json, "print JSON instead of tables");
      o->numerics.add_to(sub);
      o->cache_type.add_to(sub);
      sub->add_flag("--profile", o->profile, "one more decode run with per-op timers: ms/token and GB/s per op");
      sub->add_flag("--pin", o->pin, "pin the read probes' workers to one CPU each");
      sub->add_flag("--stream-experts", o->stream_experts, "read routed experts from the shards on demand");
      sub->add_option_function<double>(
             "--expert-cache-gb",
             [o](double v) {
               if (!(v >= 0 && v <= 1e6))
                 throw CLI::ValidationError("--expert-cache-gb",
                                            "expected a number of GB in [0, 1e6], found " + k3cli::number_text(v));
               o->expert_cache_gb = v;
               o->stream_experts = true;
             },
             "streamed experts: LRU cache budget in GB (0 = none); implies --stream-experts")
          ->type_name("GB");
      sub->add_option("--io-threads", o->io_threads, "streamed experts: reads in flight")
          ->capture_default_str()
          ->check(k3cli::IntRange(1, 1024));
      sub->add_option("--trunk-memory", o->trunk_memory,
                      "trunk matrices read from the mapping (map) or from a copy in 2 MiB pages (copy)")
          ->capture_default_str()
          ->check(CLI::IsMember({"map", "copy"}));
      sub->callback([o] { run(*o); });
    });

}  // namespace
