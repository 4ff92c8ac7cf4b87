// `k3 info DIR [-c N] [--json] [--plan --ram-gb N[,N...]]`: opens and validates a checkpoint, then prints its architecture,
// layer plan, parameter counts (total / active per token), bytes per dtype and the per-sequence
// state for N tokens of context. It also loads the tokenizer files (as `k3 run` would) and checks
// the config's token ids against the vocabulary; --check scans every tensor's bytes for NaN/Inf
// and impossible MXFP4 scales (io/tensor_check.h), with a progress bar on large checkpoints.
// A folder with config.json and the tokenizer but no weights (models/k3-config) is reported as
// such, with the published layout's sizes and the memory plan computed from config.json.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache_type_flag.h"
#include "command.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "flag_checks.h"
#include "io/drive_probe.h"
#include "io/memory_plan.h"
#include "io/model_summary.h"
#include "io/tensor_check.h"
#include "io/tensor_table.h"
#include "kernels/read_bandwidth.h"
#include "kernels/threads.h"
#include "tokenizer/tokenizer.h"

namespace {

// Evaluated before anything is printed, so an overflow is an error, not half a report.
void sb_total_checked(const k3::StateBytes& sb, int64_t n_ctx) { (void)sb.total(n_ctx); }

std::string group_digits(int64_t v) {
  std::string s = std::to_string(v), r;
  int n = 0;
  for (auto it = s.rbegin(); it != s.rend(); ++it) {
    if (n && n % 3 == 0 && *it != '-') r.insert(r.begin(), ',');
    r.insert(r.begin(), *it);
    ++n;
  }
  return r;
}

std::string human_params(int64_t v) {
  char b[32];
  const double d = static_cast<double>(v);
  if (d >= 1e12) std::snprintf(b, sizeof b, "%.3f T", d / 1e12);
  else if (d >= 1e9) std::snprintf(b, sizeof b, "%.2f B", d / 1e9);
  else if (d >= 1e6) std::snprintf(b, sizeof b, "%.2f M", d / 1e6);
  else std::snprintf(b, sizeof b, "%lld", static_cast<long long>(v));
  return b;
}

std::string fmt_g(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

std::string human_bytes(uint64_t v) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double d = static_cast<double>(v);
  int u = 0;
  while (d >= 1024 && u < 4) {
    d /= 1024;
    ++u;
  }
  char b[48];
  if (u == 0) std::snprintf(b, sizeof b, "%llu B", static_cast<unsigned long long>(v));
  else std::snprintf(b, sizeof b, "%.2f %s", d, units[u]);
  return b;
}

void print_human(const std::string& dir, const k3::ModelConfig& c, const k3::CheckpointStats& st,
                 const k3::ParamCounts& p, const k3::StateBytes& sb, int64_t n_ctx, bool weights_present) {
  std::printf("checkpoint    %s\n", dir.c_str());
  std::printf("architecture  %s (model_type %s%s)\n", c.architecture.empty() ? "-" : c.architecture.c_str(),
              c.model_type.empty() ? "-" : c.model_type.c_str(), c.wrapped ? ", text model under text_config" : "");
  std::printf("trunk         %d layers, hidden %d, vocab %d, rms_norm_eps %g, AttnRes block %d\n", c.num_hidden_layers,
              c.hidden_size, c.vocab_size, c.rms_norm_eps, c.attn_res_block_size);
  std::printf(
      "KDA           %d layers: %d heads x %d, short conv %d, gate %s\n", c.n_kda_layers(), c.kda_num_heads,
      c.kda_head_dim, c.short_conv_kernel_size,
      c.gate_lower_bound ? ("lower bound " + fmt_g(*c.gate_lower_bound)).c_str() : "Kimi-Linear (no lower bound)");
  std::printf("MLA           %d layers: %d heads, q_lora %d, kv_lora %d, qk %d+%d (NoPE %s), v %d, output gate %s\n",
              c.n_mla_layers(), c.num_attention_heads, c.q_lora_rank, c.kv_lora_rank, c.qk_nope_head_dim,
              c.qk_rope_head_dim, c.mla_use_nope ? "yes" : "no", c.v_head_dim, c.mla_use_output_gate ? "yes" : "no");
  std::string mla;
  for (int il : c.mla_layer_indices()) mla += (mla.empty() ? "" : " ") + std::to_string(il);
  std::printf("MLA layers    %s (0-indexed)\n", mla.c_str());
  std::string dense;
  for (const auto& l : c.plan)
    if (l.ffn == k3::FfnKind::Dense) dense += (dense.empty() ? "" : " ") + std::to_string(l.il);
  std::printf(
      "FFN           %d dense (layers %s; width %d) + %d LatentMoE (%d experts, top-%d, %d shared, latent %d, "
      "expert width %d, %s)\n",
      c.num_hidden_layers - c.n_moe_layers(), dense.empty() ? "-" : dense.c_str(), c.intermediate_size,
      c.n_moe_layers(), c.num_experts, c.num_experts_per_token, c.num_shared_experts, c.routed_expert_hidden_size,
      c.moe_intermediate_size, c.hidden_act.c_str());
  std::printf("layer plan    (K = KDA, M = MLA, d = dense FFN, else LatentMoE; one row per AttnRes block)\n%s\n",
              k3::format_layer_plan(c).c_str());
  std::printf("parameters    total %s (%s), active per token %s (%s; excludes the embedding table)\n",
              group_digits(p.total).c_str(), human_params(p.total).c_str(), group_digits(p.active).c_str(),
              human_params(p.active).c_str());
  std::printf("  attention   KDA %s + MLA %s\n", human_params(p.attention_kda).c_str(),
              human_params(p.attention_mla).c_str());
  std::printf("  FFN         dense %s, shared %s, latent %s, router %s, routed %s (active %s)\n",
              human_params(p.dense_mlp).c_str(), human_params(p.moe_shared).c_str(), human_params(p.moe_latent).c_str(),
              human_params(p.moe_router).c_str(), human_params(p.routed_experts).c_str(),
              human_params(p.routed_active).c_str());
  std::printf("  other       embedding %s, lm_head %s, norms+AttnRes %s\n", human_params(p.embedding).c_str(),
              human_params(p.lm_head).c_str(), human_params(p.norms_attn_res).c_str());
  if (weights_present) {
    std::printf("tensors       %lld in %d shard(s): %lld text, %lld vision (%s)\n",
                static_cast<long long>(st.n_tensors), st.shard_count, static_cast<long long>(st.n_text),
                static_cast<long long>(st.n_vision), c.vision ? "validated" : "skipped");
    std::printf("weights       text %s (%s bytes), vision %s\n", human_bytes(st.text_bytes).c_str(),
                group_digits(static_cast<int64_t>(st.text_bytes)).c_str(), human_bytes(st.vision_bytes).c_str());
  } else {
    std::printf("tensors       ABSENT: no shards in this folder; the published layout has %lld text tensors\n",
                static_cast<long long>(st.n_text));
    std::printf("weights       ABSENT; the published text weights are %s (%s bytes), from config.json\n",
                human_bytes(st.text_bytes).c_str(), group_digits(static_cast<int64_t>(st.text_bytes)).c_str());
  }
  if (c.vision) {
    const k3::VisionConfig& v = *c.vision;
    const k3::CheckpointStats vs = k3::published_vision_stats(c);
    std::printf(
        "vision        MoonViT-V2 tower: %d blocks, width %d, %d heads x %d, MLP %d, position table %dx%d; "
        "projector %lld -> %d; %lld tensors, %s (%s bytes, BF16)\n",
        v.num_layers, v.hidden_size, v.num_heads, v.head_dim(), v.intermediate_size, v.pos_emb_height, v.pos_emb_width,
        static_cast<long long>(v.merged_width()), v.text_hidden_size, static_cast<long long>(vs.n_vision),
        human_bytes(vs.vision_bytes).c_str(), group_digits(static_cast<int64_t>(vs.vision_bytes)).c_str());
  } else {
    std::printf("vision        none: text-only (%s)\n", c.vision_kind == k3::VisionConfigKind::Placeholder
                                                            ? "vision_config is a placeholder without vt_hidden_size"
                                                            : "no vision_config in config.json");
  }
  for (const auto& [dt, b] : st.text_bytes_by_dtype)
    std::printf("  %-11s %s in %lld tensors\n", std::string(k3::dtype_name(dt)).c_str(), human_bytes(b).c_str(),
                static_cast<long long>(st.text_tensors_by_dtype.at(dt)));
  std::printf("state         per sequence at -c %lld tokens: %s\n", static_cast<long long>(n_ctx),
              human_bytes(sb.total(n_ctx)).c_str());
  std::printf("  KDA         recurrent %s + conv %s per layer x %d = %s (constant in tokens)\n",
              human_bytes(sb.kda_recurrent_per_layer).c_str(), human_bytes(sb.kda_conv_per_layer).c_str(),
              c.n_kda_layers(), human_bytes(sb.kda_total).c_str());
  std::printf("  MLA cache   %llu B per token per layer x %d = %llu B/token -> %s\n",
              static_cast<unsigned long long>(sb.mla_per_token_per_layer), c.n_mla_layers(),
              static_cast<unsigned long long>(sb.mla_per_token), human_bytes(sb.mla_bytes(n_ctx)).c_str());
}

nlohmann::json to_json(const std::string& dir, const k3::ModelConfig& c, const k3::CheckpointStats& st,
                       const k3::ParamCounts& p, const k3::StateBytes& sb, int64_t n_ctx) {
  nlohmann::json j;
  j["dir"] = dir;
  j["architecture"] = c.architecture;
  j["model_type"] = c.model_type;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["hidden_size"] = c.hidden_size;
  j["vocab_size"] = c.vocab_size;
  j["kda_layers"] = c.n_kda_layers();
  j["mla_layers"] = c.n_mla_layers();
  j["mla_layer_indices"] = c.mla_layer_indices();
  j["moe_layers"] = c.n_moe_layers();
  j["dense_layers"] = c.num_hidden_layers - c.n_moe_layers();
  j["num_experts"] = c.num_experts;
  j["num_experts_per_token"] = c.num_experts_per_token;
  std::string plan;
  for (const auto& l : c.plan) plan += l.attn == k3::AttnKind::KDA ? 'K' : 'M';
  j["layer_plan"] = plan;
  j["params"] = {{"total", p.total},
                 {"active", p.active},
                 {"embedding", p.embedding},
                 {"lm_head", p.lm_head},
                 {"attention_kda", p.attention_kda},
                 {"attention_mla", p.attention_mla},
                 {"dense_mlp", p.dense_mlp},
                 {"moe_shared", p.moe_shared},
                 {"moe_latent", p.moe_latent},
                 {"moe_router", p.moe_router},
                 {"routed_experts", p.routed_experts},
                 {"routed_active", p.routed_active},
                 {"norms_attn_res", p.norms_attn_res}};
  j["shards"] = st.shard_count;
  j["tensors"] = {{"total", st.n_tensors}, {"text", st.n_text}, {"vision", st.n_vision}};
  j["bytes"] = {{"text", st.text_bytes}, {"vision", st.vision_bytes}};
  if (c.vision) {
    const k3::VisionConfig& v = *c.vision;
    const k3::CheckpointStats vs = k3::published_vision_stats(c);
    j["vision_tower"] = {{"blocks", v.num_layers},
                         {"hidden_size", v.hidden_size},
                         {"num_heads", v.num_heads},
                         {"head_dim", v.head_dim()},
                         {"intermediate_size", v.intermediate_size},
                         {"pos_emb", {v.pos_emb_height, v.pos_emb_width}},
                         {"projector", {v.merged_width(), v.text_hidden_size}},
                         {"tensors", vs.n_vision},
                         {"bytes", vs.vision_bytes}};
  } else {
    j["vision_tower"] = nullptr;
  }
  for (const auto& [dt, b] : st.text_bytes_by_dtype) j["bytes_by_dtype"][std::string(k3::dtype_name(dt))] = b;
  j["state"] = {{"n_ctx", n_ctx},
                {"dtype", "F32"},
                {"kda_recurrent_per_layer", sb.kda_recurrent_per_layer},
                {"kda_conv_per_layer", sb.kda_conv_per_layer},
                {"kda_total", sb.kda_total},
                {"mla_per_token", sb.mla_per_token},
                {"total", sb.total(n_ctx)}};
  return j;
}

struct InfoOptions {
  std::string dir;
  int64_t n_ctx = 4096;
  k3cli::CacheTypeFlag cache_type;  ///< --cache-type: the MLA cache rows counted
  bool json = false;
  bool check = false;
  // --plan (io/memory_plan.h)
  bool plan = false;
  std::vector<double> ram_gb;
  std::string trunk_type = "bf16";
  std::string trunk_memory = "map";  ///< --trunk-memory (io/memory_plan.h TrunkMemory)
  int64_t n_parallel = 1;
  int ranks = 1;  ///< --ranks: the plan of one rank of a tensor + expert parallel group
  double prefix_cache_gb = 0;
  double expert_cache_gb = -1;  ///< < 0: everything left
  bool mapped = false;
  double ram_gbs = 0, drive_gbs = 0;
  double prediction_right = 0;  ///< --prediction-right: next-layer prefetch estimate (0 = none)
  bool probe = false;
};

// The plans of --plan, one per --ram-gb value; bandwidths from --ram-gbs/--drive-gbs or --probe
// (RAM: kernels/read_bandwidth.h; drive: io/drive_probe.h, random expert-sized O_DIRECT reads
// of the shards, skipped with a note when the shards are sparse).
std::vector<k3::MemoryPlan> make_plans(const InfoOptions& o, const k3::ModelConfig& config, const k3::WeightBytes& wb) {
  const auto tt = k3::trunk_type_from_name(o.trunk_type);
  if (!tt) throw k3::Error("--trunk-type: expected bf16, q8 or q4, found '" + o.trunk_type + "'");
  const auto tm = k3::trunk_memory_from_name(o.trunk_memory);
  if (!tm) throw k3::Error("--trunk-memory: expected map or copy, found '" + o.trunk_memory + "'");
  if (o.ram_gb.empty()) throw k3::Error("--plan: give the machine's RAM with --ram-gb N (several values allowed)");
  double ram_gbs = o.ram_gbs, drive_gbs = o.drive_gbs;
  if (o.probe) {
    if (ram_gbs <= 0) ram_gbs = k3::measure_read_bandwidth(256ull << 20, 5).median_gbs;
    if (drive_gbs <= 0) {
      std::vector<std::string> files;
      const std::filesystem::path dir = o.dir;
      uint64_t allocated = 0, size = 0;
      for (const auto& e : std::filesystem::directory_iterator(dir))
        if (e.path().extension() == ".safetensors") {
          files.push_back(e.path().string());
          struct stat sb {};
          if (::stat(e.path().c_str(), &sb) == 0) {
            allocated += static_cast<uint64_t>(sb.st_blocks) * 512;
            size += static_cast<uint64_t>(sb.st_size);
          }
        }
      if (files.empty()) {
        std::fprintf(stderr, "plan: no shards in %s: no drive probe; give --drive-gbs\n", o.dir.c_str());
      } else if (allocated * 2 < size) {
        std::fprintf(stderr,
                     "plan: the shards are sparse (%.1f of %.1f GB allocated): no drive probe; give --drive-gbs\n",
                     static_cast<double>(allocated) / 1e9, static_cast<double>(size) / 1e9);
      } else {
        k3::DriveProbeOptions po;  // records of this checkpoint's expert size (K3: 17.55 MB)
        const int64_t n_exp = int64_t{config.n_moe_layers()} * config.num_experts;
        if (n_exp > 0 && wb.experts > 0) po.record_bytes = wb.experts / static_cast<uint64_t>(n_exp);
        po.random = true;
        po.records = 32;
        const auto r = k3::probe_drive(files, po);
        drive_gbs = r.gbs;
        std::fprintf(stderr, "plan: drive probe %.2f GB/s (%lld random %.2f MB reads, %s)\n", r.gbs,
                     static_cast<long long>(r.records), static_cast<double>(po.record_bytes) / 1e6,
                     r.direct ? "O_DIRECT" : "buffered");
      }
    }
  }
  std::vector<k3::MemoryPlan> plans;
  for (double g : o.ram_gb) {
    if (!(g > 0 && g < 1e7)) throw k3::Error("--ram-gb: expected a number of GB > 0, found " + fmt_g(g));
    k3::PlanRequest r;
    r.ram_bytes = static_cast<uint64_t>(g * 1e9);
    r.trunk = *tt;
    r.trunk_memory = *tm;
    r.stream_experts = !o.mapped;
    if (o.expert_cache_gb >= 0) r.expert_cache_bytes = static_cast<uint64_t>(o.expert_cache_gb * 1e9);
    r.n_ctx = o.n_ctx;
    r.mla_cache = o.cache_type.type();
    r.n_parallel = o.n_parallel;
    r.ranks = o.ranks;
    r.prefix_cache_bytes = static_cast<uint64_t>(o.prefix_cache_gb * 1e9);
    r.ram_gbs = ram_gbs;
    r.drive_gbs = drive_gbs;
    r.prediction_right = o.prediction_right;
    plans.push_back(k3::make_memory_plan(config, wb, r));
  }
  return plans;
}

nlohmann::json plan_json(const k3::MemoryPlan& p) {
  return {{"ram_bytes", p.req.ram_bytes},
          {"trunk_type", std::string(k3::trunk_type_name(p.req.trunk))},
          {"trunk_memory", std::string(k3::trunk_memory_name(p.req.trunk_memory))},
          {"stream_experts", p.req.stream_experts},
          {"ranks", p.req.ranks},
          {"rank_experts_per_layer", p.share.experts},
          {"rank_kda_state_per_seq", p.share.kda_state},
          {"trunk", p.trunk},
          {"states", p.states},
          {"prefix_cache", p.prefix_cache},
          {"expert_buffers", p.transient},
          {"reserve", p.reserve},
          {"expert_cache", p.expert_cache},
          {"experts_total", p.experts_total},
          {"total", p.total},
          {"fits", p.fits},
          {"refusal", p.refusal},
          {"hit_rate", p.hit_rate},
          {"expert_bytes_per_token", p.expert_bytes_per_token},
          {"drive_bytes_per_token", p.drive_bytes_per_token},
          {"ram_bytes_per_token", p.ram_bytes_per_token},
          {"tokens_per_s_serial", p.tokens_per_s_serial},
          {"tokens_per_s_overlapped", p.tokens_per_s_overlapped},
          {"tokens_per_s_prefetch", p.tokens_per_s_prefetch}};
}

// Progress of --check on stderr: redrawn in place on a terminal, a line every ~10% otherwise;
// silent for checkpoints under 256 MiB.
class ScanProgress {
 public:
  explicit ScanProgress(uint64_t total) : total_(total), on_(total >= (256ull << 20)), tty_(isatty(2) != 0) {}
  void update(uint64_t done) {
    if (!on_) return;
    const double frac = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
    const int pct = static_cast<int>(frac * 100.0);
    if (tty_) {
      if (pct == last_ && done != total_) return;
      const int width = 30, fill = static_cast<int>(frac * width + 0.5);
      std::string bar(static_cast<std::size_t>(fill), '=');
      bar.resize(width, ' ');
      std::fprintf(stderr, "\rcheck [%s] %3d%%  %.1f / %.1f GiB", bar.c_str(), pct, done / 1073741824.0,
                   total_ / 1073741824.0);
      if (done == total_) std::fputc('\n', stderr);
    } else {
      if (pct / 10 == last_ / 10 && done != total_) return;
      std::fprintf(stderr, "check: %3d%%  %.1f / %.1f GiB\n", pct, done / 1073741824.0, total_ / 1073741824.0);
    }
    last_ = pct;
    std::fflush(stderr);
  }

 private:
  uint64_t total_;
  bool on_, tty_;
  int last_ = -1;
};

struct CheckResult {
  uint64_t n_scanned = 0, bytes = 0;
  std::vector<std::string> findings;  ///< one per bad tensor, in checkpoint order
};

// Scans every text tensor (vision tensors are never loaded, so never checked), in parallel.
CheckResult check_tensors(const k3::Checkpoint& ck) {
  std::vector<const k3::TensorView*> ts;
  uint64_t total = 0;
  for (const auto& t : ck.tensors())
    if (!k3::is_vision_tensor_name(t.name)) {
      ts.push_back(&t);
      total += t.nbytes;
    }
  std::vector<k3::TensorScan> res(ts.size());
  ScanProgress progress(total);
  std::atomic<uint64_t> done{0};
  std::mutex mu;
  k3::parallel_for(static_cast<int64_t>(ts.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      res[static_cast<size_t>(i)] = k3::scan_tensor(*ts[static_cast<size_t>(i)]);
      const uint64_t d = done.fetch_add(ts[static_cast<size_t>(i)]->nbytes) + ts[static_cast<size_t>(i)]->nbytes;
      std::lock_guard<std::mutex> lock(mu);
      progress.update(d);
    }
  });
  progress.update(total);
  CheckResult r;
  r.bytes = total;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (res[i].scanned) ++r.n_scanned;
    if (!res[i].ok()) r.findings.push_back(ts[i]->file + ": tensor '" + ts[i]->name + "': " + res[i].describe(*ts[i]));
  }
  return r;
}

// A folder with config.json but no shards and no index (e.g. models/k3-config: K3's config and
// tokenizer without the 1.56 TB of weights): the sizes are the published inventory computed from
// config.json (io/tensor_table.h), said so on stderr, and --check is refused.
bool weights_absent(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir) || !std::filesystem::exists(dir / "config.json")) return false;
  if (std::filesystem::exists(dir / "model.safetensors.index.json")) return false;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") return false;
  return true;
}

void run_info(const InfoOptions& o) {
  const bool absent = weights_absent(o.dir);
  if (absent && o.check)
    throw k3::Error("info --check: " + o.dir +
                    " holds no weights (no *.safetensors, no model.safetensors.index.json): nothing to scan");
  std::unique_ptr<k3::Checkpoint> ck;
  k3::ModelConfig config;
  if (absent) {
    config = k3::load_config(std::filesystem::path(o.dir) / "config.json");
  } else {
    // headers only (pread, nothing mapped) unless --check reads the bytes
    k3::CheckpointOptions co;
    co.map_data = o.check;
    ck = k3::Checkpoint::open(o.dir, co);
    config = ck->config();
  }
  const k3::ModelConfig& c = config;
  // the tokenizer files `k3 run` would load (tiktoken.model, tokenizer_config.json)
  const k3::Tokenizer tok = k3::Tokenizer::load(o.dir);
  if (tok.vocab_size() > c.vocab_size)
    throw k3::Error(o.dir + ": the tokenizer has " + std::to_string(tok.vocab_size()) +
                    " ids but config.json vocab_size is " + std::to_string(c.vocab_size));
  k3::check_config_token_ids(c, tok.vocab_size(), o.dir + "/config.json");
  sb_total_checked(k3::state_bytes(c, o.cache_type.type()), o.n_ctx);
  if (o.check) {
    const CheckResult cr = check_tensors(*ck);
    if (!cr.findings.empty()) {
      std::string msg = "info --check: " + std::to_string(cr.findings.size()) +
                        " tensor(s) hold non-finite values or impossible MXFP4 scales: ";
      for (size_t i = 0; i < cr.findings.size() && i < 8; ++i) msg += (i ? "; " : "") + cr.findings[i];
      if (cr.findings.size() > 8) msg += "; and " + std::to_string(cr.findings.size() - 8) + " more";
      throw k3::Error(msg);
    }
    std::fprintf(stderr, "check: %llu tensors scanned (%s): no NaN, no Inf, no impossible MXFP4 scale\n",
                 static_cast<unsigned long long>(cr.n_scanned), human_bytes(cr.bytes).c_str());
  }
  if (absent)
    std::fprintf(stderr,
                 "info: %s holds config.json and the tokenizer but no weights (no *.safetensors): tensors and sizes "
                 "below are the published layout computed from config.json\n",
                 o.dir.c_str());
  const auto st = absent ? k3::published_text_stats(c) : k3::checkpoint_stats(*ck);
  const auto p = k3::count_params(c);
  const auto sb = k3::state_bytes(c, o.cache_type.type());
  std::vector<k3::MemoryPlan> plans;
  if (o.plan) plans = make_plans(o, c, absent ? k3::weight_bytes(c) : k3::weight_bytes(*ck));
  if (o.json) {
    nlohmann::json j = to_json(o.dir, c, st, p, sb, o.n_ctx);
    j["state"]["mla_cache_type"] = o.cache_type.name;
    j["weights_present"] = !absent;
    for (const auto& pl : plans) j["plans"].push_back(plan_json(pl));
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    print_human(o.dir, c, st, p, sb, o.n_ctx, !absent);
    for (const auto& pl : plans) std::printf("\n%s", pl.format().c_str());
  }
}

k3cli::Registrar reg(
    "info", "Validate a checkpoint and print its architecture, sizes and state memory", [](CLI::App* sub) {
      auto opt = std::make_shared<InfoOptions>();
      sub->add_option("dir,-m,--model", opt->dir, "checkpoint directory (positional, or -m DIR)")->required();
      sub->add_option("-c,--ctx", opt->n_ctx, "context length for the state estimate (tokens)")
          ->capture_default_str()
          ->check(k3cli::IntRange(0));
      opt->cache_type.add_to(sub);
      sub->add_flag("--json", opt->json, "machine-readable output");
      sub->add_flag("--check", opt->check,
                    "also scan every tensor for NaN/Inf and impossible MXFP4 scales (reads every byte)");
      sub->add_flag("--plan", opt->plan, "print the memory plan for --ram-gb");
      sub->add_option("--ranks", opt->ranks,
                      "plan: the per-rank plan of `mpirun -np N` (tensor + expert parallel; docs/distributed.md)")
          ->check(k3cli::IntRange(1, 4096));
      sub->add_option("--ram-gb", opt->ram_gb, "machine RAM in GB for --plan (several: 64,128)")->delimiter(',');
      sub->add_option("--trunk-type", opt->trunk_type, "plan: trunk type bf16 | q8 | q4")->capture_default_str();
      sub->add_option("--trunk-memory", opt->trunk_memory,
                      "plan: trunk matrices map (page cache) | copy (anonymous 2 MiB pages; held once either way)")
          ->capture_default_str();
      sub->add_option("--parallel", opt->n_parallel, "plan: sequences in parallel")
          ->capture_default_str()
          ->check(k3cli::IntRange(1, 1 << 20));
      sub->add_option("--prefix-cache-gb", opt->prefix_cache_gb, "plan: prefix cache budget in GB")
          ->check(CLI::Range(0.0, 1e7));
      sub->add_option("--expert-cache-gb", opt->expert_cache_gb,
                      "plan: expert cache in GB (default: all RAM the plan leaves)")
          ->check(CLI::Range(0.0, 1e7));
      sub->add_flag("--mapped", opt->mapped, "plan: experts mapped (all in RAM) instead of streamed");
      sub->add_option("--ram-gbs", opt->ram_gbs, "plan: RAM read bandwidth in GB/s")->check(CLI::Range(0.0, 1e6));
      sub->add_option("--drive-gbs", opt->drive_gbs, "plan: drive read bandwidth in GB/s")->check(CLI::Range(0.0, 1e6));
      sub->add_option("--prediction-right", opt->prediction_right,
                      "plan: share of experts the next-layer prefetch predicts right (0-1; 0 = no prefetch estimate)")
          ->check(CLI::Range(0.0, 1.0));
      sub->add_flag("--probe", opt->probe, "plan: measure the RAM and drive bandwidths");
      sub->callback([opt] { run_info(*opt); });
    });

}  // namespace
