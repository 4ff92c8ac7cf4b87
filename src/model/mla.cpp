#include "model/mla.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/ref/activations.h"
#include "kernels/threads.h"
#include "kernels/ref/linear.h"
#include "kernels/ref/norms.h"
#include "kernels/vec.h"
#include "model/buffer.h"

namespace k3 {

MlaDims MlaDims::from(const ModelConfig& c) {
  MlaDims d;
  d.D = c.hidden_size;
  d.H = c.num_attention_heads;
  d.q_rank = c.q_lora_rank;
  d.kv_rank = c.kv_lora_rank;
  d.dn = c.qk_nope_head_dim;
  d.dr = c.qk_rope_head_dim;
  d.dv = c.v_head_dim;
  d.norm_eps = c.mla_norm_eps;
  d.output_gate = c.mla_use_output_gate;
  if (d.H <= 0 || d.q_rank <= 0 || d.kv_rank <= 0 || d.dn + d.dr <= 0 || d.dv <= 0)
    throw Error(
        "config: MLA dimensions must be positive (num_attention_heads, q_lora_rank, "
        "kv_lora_rank, qk_*_head_dim, v_head_dim)");
  return d;
}

namespace {

double dot(const float* a, const float* b, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(a[i]) * b[i];
  return acc;
}

/// Expanded attention for one head and one query over cache rows [0, n_ctx):
/// kv: [n_all, dn + dv] per-position k_nope and v of this head.
void attend_expanded(const float* q, const float* cache, const float* kv, int64_t n_ctx, const MlaDims& d, float scale,
                     std::vector<float>& p, float* o) {
  const int64_t row = d.row();
  for (int64_t s = 0; s < n_ctx; ++s) {
    const double sc = dot(q, kv + s * (d.dn + d.dv), d.dn) + dot(q + d.dn, cache + s * row + d.kv_rank, d.dr);
    p[s] = static_cast<float>(sc * scale);
  }
  ref::softmax(p.data(), n_ctx, p.data());
  for (int64_t j = 0; j < d.dv; ++j) {
    double acc = 0.0;
    for (int64_t s = 0; s < n_ctx; ++s) acc += static_cast<double>(p[s]) * kv[s * (d.dn + d.dv) + d.dn + j];
    o[j] = static_cast<float>(acc);
  }
}

/// Absorbed attention for one head h and one query (spec §3.3 "Absorbed decode").
void attend_absorbed(const MlaWeights& w, int64_t h, const float* q, const float* cache, int64_t n_ctx,
                     const MlaDims& d, float scale, std::vector<float>& p, std::vector<float>& q_abs,
                     std::vector<float>& ctx, float* o) {
  const int64_t row = d.row(), hb = h * (d.dn + d.dv);
  ref::matvec_t_rows(*w.kv_b, hb, d.dn, q, q_abs.data());  // q_abs = W_kb,hᵀ q_nope  [kvr]
  for (int64_t s = 0; s < n_ctx; ++s) {
    const float* r = cache + s * row;
    const double sc = dot(q_abs.data(), r, d.kv_rank) + dot(q + d.dn, r + d.kv_rank, d.dr);
    p[s] = static_cast<float>(sc * scale);
  }
  ref::softmax(p.data(), n_ctx, p.data());
  for (int64_t j = 0; j < d.kv_rank; ++j) {
    double acc = 0.0;
    for (int64_t s = 0; s < n_ctx; ++s) acc += static_cast<double>(p[s]) * cache[s * row + j];
    ctx[j] = static_cast<float>(acc);
  }
  ref::matvec_rows(*w.kv_b, hb + d.dn, d.dv, ctx.data(), o);  // o = W_vb,h ctx  [dv]
}

/// Oracle attention (fp64 dots) for T queries q [T, H, dn + dr] of one sequence over its
/// (already appended) cache into o [T, H, dv].
void mla_attend_ref(const MlaWeights& w, const MlaDims& d, const float* q, int64_t T, const MlaCache& cache,
                    int64_t n_past, bool absorbed, float scale, float* o) {
  const int64_t H = d.H, dq = d.dn + d.dr, row = d.row(), n_all = n_past + T;
  std::vector<float> decoded;  // BF16 / FP8 rows as fp32
  if (cache.type != MlaCacheType::F32) {
    decoded.resize(static_cast<size_t>(n_all * row));
    mla_cache_decode(cache.type, cache.enc.data(), n_all, d.kv_rank, d.dr, decoded.data());
  }
  const float* crows = cache.type == MlaCacheType::F32 ? cache.rows.data() : decoded.data();
  std::vector<float> p(n_all), q_abs(d.kv_rank), ctx(d.kv_rank);
  std::vector<float> kv;  // Expanded: [n_all, dn + dv] for one head
  for (int64_t h = 0; h < H; ++h) {
    if (!absorbed) {
      kv.resize(static_cast<size_t>(n_all * (d.dn + d.dv)));
      for (int64_t s = 0; s < n_all; ++s)
        ref::matvec_rows(*w.kv_b, h * (d.dn + d.dv), d.dn + d.dv, crows + s * row, kv.data() + s * (d.dn + d.dv));
    }
    for (int64_t t = 0; t < T; ++t) {
      const float* qh = q + t * H * dq + h * dq;
      float* oh = o + t * H * d.dv + h * d.dv;
      const int64_t n_ctx = n_past + t + 1;  // causal
      if (absorbed) attend_absorbed(w, h, qh, crows, n_ctx, d, scale, p, q_abs, ctx, oh);
      else attend_expanded(qh, crows, kv.data(), n_ctx, d, scale, p, oh);
    }
  }
}

}  // namespace

MlaKvbHalves mla_split_kv_b(const MlaWeights& w, const MlaDims& d) {
  const TensorView& t = *w.kv_b;
  const std::vector<int64_t> want = {d.H * (d.dn + d.dv), d.kv_rank};
  std::string shape = "[";
  for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(t.shape[i]);
  shape += t.data == nullptr && t.numel() != 0 ? "] without data" : "]";
  if (t.dtype != DType::BF16 || t.shape != want || (t.data == nullptr && t.numel() != 0))
    throw Error("tensor '" + t.name + "': the MLA attention needs kv_b as BF16 [" + std::to_string(want[0]) + ", " +
                std::to_string(want[1]) + "] with data, found " + std::string(dtype_name(t.dtype)) + " " + shape);
  MlaKvbHalves h;
  const auto* bits = reinterpret_cast<const uint16_t*>(t.data);  // read with unaligned-safe loads
  h.k_nope = bits;
  h.v = bits + d.dn * d.kv_rank;
  h.head_stride = (d.dn + d.dv) * d.kv_rank;
  h.name = t.name;
  return h;
}

MlaAttnShape mla_attn_shape(const MlaDims& d) { return MlaAttnShape{d.H, d.dn, d.dr, d.dv, d.kv_rank}; }

void mla_forward(const MlaWeights& w, const MlaDims& d, const float* x, int64_t T, MlaCache& cache, float* out,
                 MlaMode mode, const ExecOptions& ex, const MlaKvbHalves* kv_b) {
  const SeqRows seg{0, T};
  MlaCache* cp = &cache;
  mla_forward_batch(w, d, x, std::span<const SeqRows>(&seg, 1), std::span<MlaCache* const>(&cp, 1), out, mode, ex,
                    kv_b);
}

void mla_forward_batch(const MlaWeights& w, const MlaDims& d, const float* x, std::span<const SeqRows> segs,
                       std::span<MlaCache* const> caches, float* out, MlaMode mode, const ExecOptions& ex,
                       const MlaKvbHalves* kv_b) {
  const int64_t H = d.H, dq = d.dn + d.dr, row = d.row();
  if (segs.size() != caches.size() || segs.empty())
    throw Error("MLA batch: expected one cache per sequence, found " + std::to_string(caches.size()) + " caches for " +
                std::to_string(segs.size()) + " sequences");
  for (size_t s = 0; s < segs.size(); ++s) {
    if (segs[s].T < 1 || segs[s].row0 != (s == 0 ? 0 : segs[s - 1].row0 + segs[s - 1].T))
      throw Error("MLA batch: sequence " + std::to_string(s) + " rows do not follow the previous one");
    const MlaCache& c = *caches[s];
    if (!c.empty() && c.type != ex.mla_cache)
      throw Error(std::string("MLA cache: the sequence holds ") + mla_cache_type_name(c.type) +
                  " rows but the model writes " + mla_cache_type_name(ex.mla_cache) +
                  " rows (--cache-type must match the state's)");
    if (c.rows.size() % static_cast<size_t>(row) != 0 || c.enc.size() % static_cast<size_t>(c.row_bytes(d)) != 0 ||
        (c.type == MlaCacheType::F32 ? !c.enc.empty() : !c.rows.empty()))
      throw Error("MLA cache: size " + std::to_string(c.rows.size() + c.enc.size()) +
                  " is not a multiple of the row width " + std::to_string(row));
  }
  const int64_t T = total_rows(segs), S = static_cast<int64_t>(segs.size());
  MlaKvbHalves own_kv_b;
  if (ex.fast && kv_b == nullptr && H > 0) {
    own_kv_b = mla_split_kv_b(w, d);
    kv_b = &own_kv_b;
  }
  const MlaAttnShape shape = mla_attn_shape(d);

  // Token-parallel projections over every row of the batch.
  FBuf qa(T * d.q_rank), q(T * H * dq), ckv(T * row), gate(T * H * d.dv);
  auto mm = [&](const TensorView& wt, const float* in, float* y) {
    if (ex.fast) k3::matmul(wt, in, T, y);
    else ref::matmul(wt, in, T, y);
  };
  if (ex.fast) {  // the projections of x: one parallel region for decode (ops.h matmul_same_input)
    const TensorView* xs[3] = {w.q_a, w.kv_a, w.g_proj};
    float* ys[3] = {qa.data(), ckv.data(), gate.data()};
    const size_t n_mat = d.output_gate && H > 0 ? 3 : 2;
    k3::matmul_same_input(std::span<const TensorView* const>(xs, n_mat), x, T, std::span<float* const>(ys, n_mat));
  } else {
    mm(*w.q_a, x, qa.data());
  }
  if (ex.fast)
    parallel_for(T, grain_for_work(1, 16 * d.q_rank), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        vec::rmsnorm(&qa[t * d.q_rank], w.q_a_norm.data(), d.norm_eps, &qa[t * d.q_rank], d.q_rank);
    });
  else
    for (int64_t t = 0; t < T; ++t)
      ref::rmsnorm(&qa[t * d.q_rank], d.q_rank, w.q_a_norm.data(), d.norm_eps, &qa[t * d.q_rank]);
  if (H > 0) mm(*w.q_b, qa.data(), q.data());
  if (!ex.fast) {
    mm(*w.kv_a, x, ckv.data());
    if (d.output_gate && H > 0) mm(*w.g_proj, x, gate.data());
  }

  // Per sequence: append [RMSNorm(c), k_r] for each new token (encoded as ex.mla_cache), then
  // attend over its cache. Auto: Absorbed for one token (decode), Expanded (tiled, memory
  // independent of the context) for several.
  const float scale = 1.0f / std::sqrt(static_cast<float>(dq));  // NoPE: 1/sqrt(dn + dr), no mscale
  FBuf o(T * H * d.dv);
  auto run_seq = [&](int64_t s) {
    MlaCache& cache = *caches[s];
    if (cache.empty()) cache.type = ex.mla_cache;
    const int64_t n_past = cache.n_tokens(d), Ts = segs[s].T, r0 = segs[s].row0;
    std::vector<float> fresh(static_cast<size_t>(Ts * row));  // the new rows in fp32
    for (int64_t t = 0; t < Ts; ++t) {
      float* r = fresh.data() + t * row;
      const float* c = &ckv[(r0 + t) * row];
      if (ex.fast) vec::rmsnorm(c, w.kv_a_norm.data(), d.norm_eps, r, d.kv_rank);
      else ref::rmsnorm(c, d.kv_rank, w.kv_a_norm.data(), d.norm_eps, r);
      for (int64_t j = 0; j < d.dr; ++j) r[d.kv_rank + j] = c[d.kv_rank + j];
    }
    if (cache.type == MlaCacheType::F32) {
      cache.rows.insert(cache.rows.end(), fresh.begin(), fresh.end());
    } else {
      const int64_t rb = cache.row_bytes(d);
      cache.enc.resize(static_cast<size_t>((n_past + Ts) * rb));
      mla_cache_encode(cache.type, fresh.data(), Ts, d.kv_rank, d.dr, cache.enc.data() + n_past * rb);
    }
    if (H == 0) return;  // a rank without heads: the cache still advances
    const bool absorbed = mode == MlaMode::Absorbed || (mode == MlaMode::Auto && Ts == 1) || segs[s].per_token;
    if (ex.fast && absorbed)
      mla_attend_absorbed(*kv_b, shape, &q[r0 * H * dq], Ts, cache.view(), n_past, &o[r0 * H * d.dv]);
    else if (ex.fast)
      mla_attend_expanded(*kv_b, shape, &q[r0 * H * dq], Ts, cache.view(), n_past, &o[r0 * H * d.dv]);
    else mla_attend_ref(w, d, &q[r0 * H * dq], Ts, cache, n_past, absorbed, scale, &o[r0 * H * d.dv]);
  };
  // With at least as many sequences as threads, sequences run in parallel (the per-head loops
  // inside then run inline); the attention's results do not depend on the thread count.
  if (ex.fast && S >= num_threads() && S > 1)
    parallel_for(S, 1, [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s) run_seq(s);
    });
  else
    for (int64_t s = 0; s < S; ++s) run_seq(s);

  if (ex.fast) {
    if (d.output_gate) vec::mul_sigmoid(gate.data(), o.data(), static_cast<int64_t>(o.size()));
    if (w.o_proj) k3::matmul(*w.o_proj, o.data(), T, out);
    else std::copy_n(o.data(), o.size(), out);
    return;
  }
  if (d.output_gate)
    for (size_t i = 0; i < o.size(); ++i) o[i] *= ref::sigmoid(gate[i]);
  if (w.o_proj) ref::matmul(*w.o_proj, o.data(), T, out);
  else std::copy_n(o.data(), o.size(), out);
}

}  // namespace k3
