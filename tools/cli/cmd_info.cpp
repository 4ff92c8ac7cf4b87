// `k3 info DIR [-c N] [--json]`: opens and validates a checkpoint, then prints its architecture,
// layer plan, parameter counts (total / active per token), bytes per dtype and the per-sequence
// state for N tokens of context.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "command.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/model_summary.h"

namespace {

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
              human_bytes(sb.mla_per_token * static_cast<uint64_t>(n_ctx)).c_str());
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
};

k3cli::Registrar reg("info", "Validate a checkpoint and print its architecture, sizes and state memory",
                     [](CLI::App* sub) {
                       auto opt = std::make_shared<InfoOptions>();
                       sub->add_option("dir", opt->dir, "checkpoint directory")->required();
                       sub->add_option("-c,--ctx", opt->n_ctx, "context length for the state estimate (tokens)")
                           ->check(CLI::NonNegativeNumber);
                       sub->add_flag("--json", opt->json, "machine-readable output");
                       sub->callback([opt] {
                         auto ck = k3::Checkpoint::open(opt->dir);
                         const auto& c = ck->config();
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
