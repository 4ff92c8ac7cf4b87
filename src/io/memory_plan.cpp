// make_memory_plan and its report (formulas in the header).
#include "io/memory_plan.h"

#include <algorithm>
#include <cstdio>

#include "core/comm.h"
#include "core/error.h"
#include "io/model_summary.h"
#include "io/tensor_table.h"

namespace k3 {

std::string_view trunk_type_name(TrunkType t) {
  switch (t) {
    case TrunkType::BF16: return "bf16";
    case TrunkType::Q8: return "q8";
    case TrunkType::Q4: return "q4";
  }
  return "?";
}

std::optional<TrunkType> trunk_type_from_name(std::string_view s) {
  if (s == "bf16") return TrunkType::BF16;
  if (s == "q8") return TrunkType::Q8;
  if (s == "q4") return TrunkType::Q4;
  return std::nullopt;
}

std::string_view trunk_memory_name(TrunkMemory m) { return m == TrunkMemory::Copy ? "copy" : "map"; }

std::optional<TrunkMemory> trunk_memory_from_name(std::string_view s) {
  if (s == "map") return TrunkMemory::Map;
  if (s == "copy") return TrunkMemory::Copy;
  return std::nullopt;
}

uint64_t trunk_matrix_bytes(uint64_t bf16_bytes, TrunkType t) {
  const uint64_t n = bf16_bytes / 2;  // elements
  switch (t) {
    case TrunkType::BF16: return bf16_bytes;
    case TrunkType::Q8: return n + n / 32 * 4;
    case TrunkType::Q4: return n / 2 + n / 32 * 4;
  }
  return bf16_bytes;
}

namespace {

/// Adds one tensor of `dtype` and `nbytes` to `w`; `embedding`: the tensor is the embedding table.
void add_tensor_bytes(WeightBytes& w, DType dtype, bool embedding, uint64_t nbytes) {
  if (dtype == DType::U8) w.experts += nbytes;
  else if (dtype == DType::BF16 && embedding) w.embedding += nbytes;
  else if (dtype == DType::BF16) w.bf16 += nbytes;
  else w.f32 += nbytes;
}

}  // namespace

WeightBytes weight_bytes(const std::vector<TensorBytes>& tensors) {
  const std::string embedding = tensor_name(TensorRole::EmbedTokens);
  WeightBytes w;
  for (const TensorBytes& t : tensors) add_tensor_bytes(w, t.dtype, text_tensor_name(t.name) == embedding, t.nbytes);
  return w;
}

WeightBytes weight_bytes(const Checkpoint& ck) {
  WeightBytes w;
  for (const TensorView& t : ck.tensors()) {
    if (is_vision_tensor_name(t.name)) continue;
    const auto m = match_tensor_name(ck.config(), text_tensor_name(t.name));
    add_tensor_bytes(w, t.dtype, m && m->role == TensorRole::EmbedTokens, t.nbytes);
  }
  return w;
}

WeightBytes weight_bytes(const ModelConfig& c) {
  WeightBytes w;
  for_each_tensor_spec(c, [&](const TensorSpec& spec) {
    for (const StoredTensor& t : stored_tensors(spec)) {
      uint64_t n = dtype_size(t.dtype);
      for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
      add_tensor_bytes(w, t.dtype, spec.role == TensorRole::EmbedTokens, n);
    }
  });
  return w;
}

namespace {

std::string gb(double b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GB", b / 1e9);
  return s;
}

}  // namespace

RankShare rank_share(const ModelConfig& c, const WeightBytes& w, int ranks) {
  if (ranks < 1) throw Error("--ranks: expected >= 1, found " + std::to_string(ranks));
  RankShare s;
  s.weights = w;
  const uint64_t B = 2;  // BF16
  const auto u = [](int64_t v) { return static_cast<uint64_t>(std::max<int64_t>(v, 0)); };
  const int64_t D = c.hidden_size, V = c.vocab_size;
  int64_t n_kda = 0, n_mla = 0, n_dense = 0, n_moe = 0;
  for (const LayerSpec& l : c.plan) {
    (l.attn == AttnKind::KDA ? n_kda : n_mla) += 1;
    (l.ffn == FfnKind::Dense ? n_dense : n_moe) += 1;
  }
  // Bytes of each split group, whole and on rank 0 (its block of each split dimension).
  uint64_t whole = 0, mine = 0;
  auto add = [&](uint64_t bytes, int64_t n, int64_t n0) {
    whole += bytes;
    mine += n > 0 ? static_cast<uint64_t>(static_cast<double>(bytes) * static_cast<double>(n0) / static_cast<double>(n))
                  : 0;
  };
  const int64_t Dr = split_range_units(D, ranks, 0, 16).size();
  if (n_kda > 0) {
    const int64_t H = c.kda_num_heads, d = c.kda_head_dim, C = H * d, H0 = split_range(H, ranks, 0).size();
    add(u(n_kda) * B * u(4 * C * D + C * d + H * D), H, H0);  // q, k, v, g_proj, f_b, b_proj
    add(u(n_kda) * B * u(D * C), D, Dr);                      // o_proj rows
  }
  if (n_mla > 0) {
    const int64_t H = c.num_attention_heads, H0 = split_range(H, ranks, 0).size();
    const int64_t dq = c.qk_nope_head_dim + c.qk_rope_head_dim, dkv = c.qk_nope_head_dim + c.v_head_dim;
    add(u(n_mla) * B * u(H * dq * c.q_lora_rank + H * dkv * c.kv_lora_rank + H * c.v_head_dim * D), H, H0);
    add(u(n_mla) * B * u(D * H * c.v_head_dim), D, Dr);
  }
  auto mlp = [&](int64_t layers, int64_t I) {
    if (layers <= 0 || I <= 0) return;
    add(u(layers) * B * u(2 * I * D), I, split_range_units(I, ranks, 0, 16).size());  // gate, up
    add(u(layers) * B * u(D * I), D, Dr);                                             // down rows
  };
  mlp(n_dense, c.intermediate_size);
  mlp(n_moe, int64_t{c.num_shared_experts} * c.moe_intermediate_size);
  if (!c.tie_word_embeddings) add(B * u(V * D), V, split_range(V, ranks, 0).size());
  s.split_bf16 = whole;
  s.split_bf16_rank = mine;
  s.weights.bf16 = w.bf16 > whole ? w.bf16 - whole + mine : mine;
  const int64_t E = n_moe > 0 ? c.num_experts : 0;
  s.experts = split_range(E, ranks, 0).size();
  const uint64_t one = E > 0 ? w.experts / (u(n_moe) * u(E)) : 0;
  s.weights.experts = one * u(n_moe) * u(s.experts);
  const StateBytes sb = state_bytes(c);
  s.kda_state =
      c.kda_num_heads > 0 ? sb.kda_total / u(c.kda_num_heads) * u(split_range(c.kda_num_heads, ranks, 0).size()) : 0;
  return s;
}

MemoryPlan make_memory_plan(const ModelConfig& c, const WeightBytes& w_all, const PlanRequest& r) {
  if (r.ram_bytes == 0) throw Error("--ram-gb: expected the machine's RAM in GB (> 0)");
  const RankShare share = rank_share(c, w_all, r.ranks);
  const WeightBytes& w = share.weights;
  if (r.n_ctx < 0) throw Error("-c/--ctx-size: expected >= 0, found " + std::to_string(r.n_ctx));
  if (r.n_parallel < 1) throw Error("-np/--parallel: expected >= 1, found " + std::to_string(r.n_parallel));
  MemoryPlan p;
  p.req = r;
  p.share = share;
  p.trunk = w.f32 + w.embedding + trunk_matrix_bytes(w.bf16, r.trunk);
  p.state_per_seq = state_bytes(c, r.mla_cache).total(r.n_ctx) - state_bytes(c).kda_total + share.kda_state;
  if (p.state_per_seq > UINT64_MAX / static_cast<uint64_t>(r.n_parallel))
    throw Error("-np/--parallel x -c/--ctx-size: the sequence states overflow 64 bits");
  p.states = p.state_per_seq * static_cast<uint64_t>(r.n_parallel);
  p.prefix_cache = r.prefix_cache_bytes;
  p.reserve = std::max<uint64_t>(2'000'000'000ull, r.ram_bytes / 100 * 3);
  p.experts_total = w.experts;
  const int n_moe = c.n_moe_layers();
  const int64_t n_experts = int64_t{n_moe} * share.experts;
  p.expert_bytes = n_experts > 0 ? w.experts / static_cast<uint64_t>(n_experts) : 0;
  const int64_t G = std::max<int64_t>(2 * int64_t{c.num_experts_per_token}, 32);
  // 2 groups pinned by a prefill chunk + 1 by the next layer's prediction + the 16 reusable buffers.
  p.transient = r.stream_experts ? static_cast<uint64_t>(3 * std::min<int64_t>(G, share.experts) +
                                                         std::min<int64_t>(16, share.experts)) *
                                       p.expert_bytes
                                 : 0;
  const uint64_t fixed = p.trunk + p.states + p.prefix_cache + p.transient + p.reserve;
  const uint64_t left = r.ram_bytes > fixed ? r.ram_bytes - fixed : 0;
  if (r.stream_experts) p.expert_cache = r.expert_cache_bytes ? *r.expert_cache_bytes : std::min(left, p.experts_total);
  else p.expert_cache = p.experts_total;
  p.expert_cache = std::min(p.expert_cache, p.experts_total);
  p.total = fixed + p.expert_cache;
  p.fits = p.total <= r.ram_bytes;
  const double f = p.experts_total ? static_cast<double>(p.expert_cache) / static_cast<double>(p.experts_total) : 1.0;
  p.hit_rate = r.stream_experts ? f : 1.0;
  // Under N ranks a rank computes about top_k / N of each token's experts (uniform routing).
  p.expert_bytes_per_token = static_cast<double>(p.expert_bytes) * c.num_experts_per_token * n_moe *
                             static_cast<double>(share.experts) / std::max(1.0, static_cast<double>(c.num_experts));
  p.drive_bytes_per_token = (1.0 - p.hit_rate) * p.expert_bytes_per_token;
  p.ram_bytes_per_token = static_cast<double>(p.trunk - w.embedding) + p.hit_rate * p.expert_bytes_per_token;
  if (r.ram_gbs > 0 && (r.drive_gbs > 0 || p.drive_bytes_per_token == 0)) {
    const double t_ram = p.ram_bytes_per_token / (r.ram_gbs * 1e9);
    const double t_drive = p.drive_bytes_per_token > 0 ? p.drive_bytes_per_token / (r.drive_gbs * 1e9) : 0.0;
    p.tokens_per_s_serial = 1.0 / (t_ram + t_drive);
    p.tokens_per_s_overlapped = 1.0 / std::max(t_ram, t_drive);
    const double pr = r.prediction_right;
    if (pr > 0) p.tokens_per_s_prefetch = 1.0 / std::max(t_ram + (1 - pr) * t_drive, (2 - pr) * t_drive);
  }
  if (!p.fits) {
    std::string why = "memory plan: " +
                      (r.ranks > 1 ? "rank 0 of " + std::to_string(r.ranks) + " (the largest share) " : std::string()) +
                      "needs " + gb(static_cast<double>(p.total)) + " but --ram-gb gives " +
                      gb(static_cast<double>(r.ram_bytes)) + " (trunk " + std::string(trunk_type_name(r.trunk)) + " " +
                      gb(static_cast<double>(p.trunk)) + " + states " + gb(static_cast<double>(p.states)) +
                      " + prefix cache " + gb(static_cast<double>(p.prefix_cache)) + " + expert buffers " +
                      gb(static_cast<double>(p.transient)) + " + reserve " + gb(static_cast<double>(p.reserve)) +
                      (r.stream_experts ? " + expert cache " : " + mapped experts ") +
                      gb(static_cast<double>(p.expert_cache)) + ")";
    std::vector<std::string> hints;
    if (!r.stream_experts) hints.push_back("--stream-experts (experts read from the drive instead of held in RAM)");
    if (r.stream_experts && r.expert_cache_bytes && fixed <= r.ram_bytes)
      hints.push_back("--expert-cache-gb " + std::to_string(static_cast<double>(left) / 1e9).substr(0, 6) + " or less");
    const uint64_t deficit = p.total - r.ram_bytes;
    for (TrunkType t : {TrunkType::Q8, TrunkType::Q4})  // a smaller trunk type that alone makes it fit
      if (static_cast<int>(t) > static_cast<int>(r.trunk)) {
        const uint64_t tb = w.f32 + w.embedding + trunk_matrix_bytes(w.bf16, t);
        if (p.trunk - tb >= deficit)
          hints.push_back("--trunk-type " + std::string(trunk_type_name(t)) + " (trunk " + gb(static_cast<double>(tb)) +
                          ")");
      }
    if (p.states > r.ram_bytes / 10)
      hints.push_back("a smaller -c or -np (states " + gb(static_cast<double>(p.state_per_seq)) +
                      " per sequence at -c " + std::to_string(r.n_ctx) + ")");
    if (p.prefix_cache > 0) hints.push_back("a smaller prefix cache");
    if (hints.empty()) hints.push_back("a machine with more RAM");
    why += "; try ";
    for (size_t i = 0; i < hints.size(); ++i) why += (i ? ", or " : "") + hints[i];
    p.refusal = why;
  }
  return p;
}

std::string MemoryPlan::format() const {
  std::string o;
  char b[512];
  auto line = [&](const char* what, double bytes, const std::string& note) {
    std::snprintf(b, sizeof b, "  %-14s %10.2f GB  %s\n", what, bytes / 1e9, note.c_str());
    o += b;
  };
  std::snprintf(b, sizeof b, "memory plan for %.1f GB of RAM (trunk %s, experts %s, -c %lld, -np %lld)\n",
                static_cast<double>(req.ram_bytes) / 1e9, std::string(trunk_type_name(req.trunk)).c_str(),
                req.stream_experts ? "streamed" : "mapped", static_cast<long long>(req.n_ctx),
                static_cast<long long>(req.n_parallel));
  o += b;
  if (req.ranks > 1) {
    std::snprintf(b, sizeof b,
                  "one rank of %d (rank 0, the largest share; docs/distributed.md): %lld experts per MoE layer, "
                  "%.2f of the %.2f GB split BF16 matrices, KDA state %s per sequence\n",
                  req.ranks, static_cast<long long>(share.experts), static_cast<double>(share.split_bf16_rank) / 1e9,
                  static_cast<double>(share.split_bf16) / 1e9, gb(static_cast<double>(share.kda_state)).c_str());
    o += b;
  }
  line("trunk", static_cast<double>(trunk),
       "resident; embedding BF16, matrices " + std::string(trunk_type_name(req.trunk)) +
           (req.trunk_memory == TrunkMemory::Copy
                ? "; BF16 matrices copied into anonymous 2 MiB pages (--trunk-memory copy), the page cache's copy "
                  "dropped: held once"
                : "; mapped (page cache, --trunk-memory map)"));
  line("states", static_cast<double>(states),
       std::to_string(req.n_parallel) + " x " + gb(static_cast<double>(state_per_seq)) +
           " (KDA state + MLA cache at -c)");
  line("prefix cache", static_cast<double>(prefix_cache), "");
  line("expert buffers", static_cast<double>(transient), "experts pinned by one prefill chunk (2 groups) and a prediction (1 group) + 16 reusable buffers");
  line("reserve", static_cast<double>(reserve), "OS, activations, logits: max(2 GB, 3% of RAM)");
  if (req.stream_experts)
    line("expert cache", static_cast<double>(expert_cache),
         std::to_string(experts_total ? 100.0 * static_cast<double>(expert_cache) / static_cast<double>(experts_total)
                                      : 0)
                 .substr(0, 5) +
             "% of " + gb(static_cast<double>(experts_total)) + " of experts (LRU)");
  else line("experts", static_cast<double>(expert_cache), "all routed experts resident (mapped)");
  line("total", static_cast<double>(total), fits ? "fits" : "DOES NOT FIT");
  std::snprintf(b, sizeof b,
                "  per token: %.2f GB of experts (%.1f MB each), expected hit rate %.1f%% (uniform routing) -> "
                "%.2f GB from the drive, %.2f GB from RAM\n",
                expert_bytes_per_token / 1e9, static_cast<double>(expert_bytes) / 1e6, 100 * hit_rate,
                drive_bytes_per_token / 1e9, ram_bytes_per_token / 1e9);
  o += b;
  if (tokens_per_s_serial > 0) {
    std::snprintf(b, sizeof b,
                  "  decode at RAM %.1f GB/s, drive %.2f GB/s: %.3f tokens/s serial (%.2f s/token), %.3f tokens/s "
                  "with reads hidden behind compute\n",
                  req.ram_gbs, req.drive_gbs, tokens_per_s_serial, 1 / tokens_per_s_serial, tokens_per_s_overlapped);
    o += b;
    if (tokens_per_s_prefetch > 0) {
      std::snprintf(b, sizeof b,
                    "  with next-layer prefetch right for %.0f%% of the experts: %.3f tokens/s (%.2f s/token)\n",
                    100 * req.prediction_right, tokens_per_s_prefetch, 1 / tokens_per_s_prefetch);
      o += b;
    }
  } else {
    o += "  decode speed: unknown (give --ram-gbs and --drive-gbs, or --probe)\n";
  }
  if (!fits) o += "  refused: " + refusal + "\n";
  return o;
}

}  // namespace k3
