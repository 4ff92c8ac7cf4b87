// `k3 info DIR [-c N] [--json]`: opens and validates a checkpoint, then prints its architecture,
// layer plan, parameter counts (total / active per token), bytes per dtype and the per-sequence
// state for N tokens of context. It also loads the tokenizer files (as `k3 run` would) and checks
// the config's token ids against the vocabulary; --check scans every tensor's bytes for NaN/Inf
// and impossible MXFP4 scales (io/tensor_check.h), with a progress bar on large checkpoints.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "flag_checks.h"
#include "io/model_summary.h"
#include "io/tensor_check.h"
#include "io/tensor_table.h"
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
                 const k3::ParamCounts& p, const k3::StateBytes& sb, int64_t n_ctx) {
  std::printf("checkpoint    %s\n", dir.c_str());
  std::printf("architecture  %s (model_type %s%s)\n", c.architecture.empty() ? "-" : c.architecture.c_str(),
              c.model_type.empty() ? "-" : c.model_type.c_str(), c.wrapped ? ", text model under text_config" : "");
  std::printf("trunk         %d layers, hidden %d, vocab %d, rms_norm_eps %g, AttnRes block %d\n",
              c.num_hidden_layers, c.hidden_size, c.vocab_size, c.rms_norm_eps, c.attn_res_block_size);
  std::printf("KDA           %d layers: %d heads x %d, short conv %d, gate %s\n", c.n_kda_layers(), c.kda_num_heads,
              c.kda_head_dim, c.short_conv_kernel_size,
              c.gate_lower_bound ? ("lower bound " + fmt_g(*c.gate_lower_bound)).c_str()
                                 : "Kimi-Linear (no lower bound)");
  std::printf("MLA           %d layers: %d heads, q_lora %d, kv_lora %d, qk %d+%d (NoPE %s), v %d, output gate %s\n",
              c.n_mla_layers(), c.num_attention_heads, c.q_lora_rank, c.kv_lora_rank, c.qk_nope_head_dim,
              c.qk_rope_head_dim, c.mla_use_nope ? "yes" : "no", c.v_head_dim, c.mla_use_output_gate ? "yes" : "no");
  std::string mla;
  for (int il : c.mla_layer_indices()) mla += (mla.empty() ? "" : " ") + std::to_string(il);
  std::printf("MLA layers    %s (0-indexed)\n", mla.c_str());
  std::string dense;
  for (const auto& l : c.plan)
    if (l.ffn == k3::FfnKind::Dense) dense += (dense.empty() ? "" : " ") + std::to_string(l.il);
  std::printf("FFN           %d dense (layers %s; width %d) + %d LatentMoE (%d experts, top-%d, %d shared, latent %d, "
              "expert width %d, %s)\n",
              c.num_hidden_layers - c.n_moe_layers(), dense.empty() ? "-" : dense.c_str(), c.intermediate_size,
              c.n_moe_layers(), c.num_experts, c.num_experts_per_token, c.num_shared_experts,
              c.routed_expert_hidden_size, c.moe_intermediate_size, c.hidden_act.c_str());
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
  std::printf("tensors       %lld in %d shard(s): %lld text, %lld vision (skipped)\n",
              static_cast<long long>(st.n_tensors), st.shard_count, static_cast<long long>(st.n_text),
              static_cast<long long>(st.n_vision));
  std::printf("weights       text %s (%s bytes), vision %s\n", human_bytes(st.text_bytes).c_str(),
              group_digits(static_cast<int64_t>(st.text_bytes)).c_str(), human_bytes(st.vision_bytes).c_str());
  for (const auto& [dt, b] : st.text_bytes_by_dtype)
    std::printf("  %-11s %s in %lld tensors\n", std::string(k3::dtype_name(dt)).c_str(), human_bytes(b).c_str(),
                static_cast<long long>(st.text_tensors_by_dtype.at(dt)));
  std::printf("state         per sequence at -c %lld tokens (fp32): %s\n", static_cast<long long>(n_ctx),
              human_bytes(sb.total(n_ctx)).c_str());
  std::printf("  KDA         recurrent %s + conv %s per layer x %d = %s (constant in tokens)\n",
              human_bytes(sb.kda_recurrent_per_layer).c_str(), human_bytes(sb.kda_conv_per_layer).c_str(),
              c.n_kda_layers(), human_bytes(sb.kda_total).c_str());
  std::printf("  MLA cache   %llu B per token per layer x %d = %llu B/token -> %s\n",
              static_cast<unsigned long long>(sb.mla_per_token_per_layer), c.n_mla_layers(),
              static_cast<unsigned long long>(sb.mla_per_token),
              human_bytes(sb.mla_bytes(n_ctx)).c_str());
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
  bool json = false;
  bool check = false;
};

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
    if (!res[i].ok())
      r.findings.push_back(ts[i]->file + ": tensor '" + ts[i]->name + "': " + res[i].describe(*ts[i]));
  }
  return r;
}

k3cli::Registrar reg("info", "Validate a checkpoint and print its architecture, sizes and state memory",
                     [](CLI::App* sub) {
                       auto opt = std::make_shared<InfoOptions>();
                       sub->add_option("dir", opt->dir, "checkpoint directory")->required();
                       sub->add_option("-c,--ctx", opt->n_ctx, "context length for the state estimate (tokens)")
                           ->capture_default_str()->check(k3cli::IntRange(0));
                       sub->add_flag("--json", opt->json, "machine-readable output");
                       sub->add_flag("--check", opt->check,
                                     "also scan every tensor for NaN/Inf and impossible MXFP4 scales (reads every byte)");
                       sub->callback([opt] {
                         // headers only (pread, nothing mapped) unless --check reads the bytes
                         k3::CheckpointOptions co;
                         co.map_data = opt->check;
                         auto ck = k3::Checkpoint::open(opt->dir, co);
                         const auto& c = ck->config();
                         // the tokenizer files `k3 run` would load (tiktoken.model, tokenizer_config.json)
                         const k3::Tokenizer tok = k3::Tokenizer::load(opt->dir);
                         if (tok.vocab_size() > c.vocab_size)
                           throw k3::Error(opt->dir + ": the tokenizer has " + std::to_string(tok.vocab_size()) +
                                           " ids but config.json vocab_size is " + std::to_string(c.vocab_size));
                         k3::check_config_token_ids(c, tok.vocab_size(), opt->dir + "/config.json");
                         sb_total_checked(k3::state_bytes(c), opt->n_ctx);
                         if (opt->check) {
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
                         const auto st = k3::checkpoint_stats(*ck);
                         const auto p = k3::count_params(c);
                         const auto sb = k3::state_bytes(c);
                         if (opt->json)
                           std::printf("%s\n", to_json(opt->dir, c, st, p, sb, opt->n_ctx).dump(2).c_str());
                         else
                           print_human(opt->dir, c, st, p, sb, opt->n_ctx);
                       });
                     });

}  // namespace
