#include "model/mla.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/bf16.h"
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
    throw Error("config: MLA dimensions must be positive (num_attention_heads, q_lora_rank, "
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
void attend_expanded(const float* q, const float* cache, const float* kv, int64_t n_ctx,
                     const MlaDims& d, float scale, std::vector<float>& p, float* o) {
  const int64_t row = d.row();
  for (int64_t s = 0; s < n_ctx; ++s) {
    const double sc = dot(q, kv + s * (d.dn + d.dv), d.dn) +
                      dot(q + d.dn, cache + s * row + d.kv_rank, d.dr);
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

/// Fast attention over the (already appended) cache for T queries q [T, H, dn + dr] into
/// o [T, H, dv], fp32 with the dispatched vector kernels (kernels/vec.h), heads in parallel.
/// Expanded (prefill): k_nope/v of every cache row from one GEMM, then per head and block of
/// queries two fp32 GEMMs (scores against the transposed keys, output from the values). Absorbed (decode, spec §3.3): the query is mapped into
/// the latent space once and scored against the cache rows directly.
void mla_attend_fast(const MlaWeights& w, const MlaDims& d, const float* q, int64_t T,
                     const MlaCache& cache, int64_t n_past, bool absorbed, float* o) {
  const int64_t H = d.H, dq = d.dn + d.dr, row = d.row(), kvr = d.kv_rank, hw = d.dn + d.dv;
  const int64_t n_all = n_past + T;
  const float* crows = cache.rows.data();
  const float scale = 1.0f / std::sqrt(static_cast<float>(dq));
  const uint8_t* kvb = w.kv_b->data;  // BF16 [H·(dn+dv), kvr]
  if (!absorbed) {
    FBuf c(static_cast<size_t>(n_all * kvr));
    for (int64_t s = 0; s < n_all; ++s) std::memcpy(&c[s * kvr], crows + s * row, kvr * sizeof(float));
    FBuf kv(static_cast<size_t>(n_all * H * hw));  // [n_all, H, dn + dv]
    k3::matmul(*w.kv_b, c.data(), n_all, kv.data());
    // Per head: keys transposed to kt [dq, n_all] (k_nope from kv, k_rope from the cache); the
    // values are read in place (rows of kv, stride H·hw). Queries in blocks of kQb: scores
    // S = (scale·Q_blk)·kt over the keys the block can see, a causal softmax per row (later
    // keys get weight 0), then O_blk = S·V. Work per head ~ T·n_all·(dq + dv) multiply-adds
    // (causal: about half of it).
    constexpr int64_t kQb = 32;
    parallel_for(H, grain_for_work(1, T * n_all * (dq + d.dv) / 2), [&](int64_t h0, int64_t h1) {
      FBuf kt(static_cast<size_t>(dq * n_all)), qs(static_cast<size_t>(kQb * dq)),
          sc(static_cast<size_t>(kQb * n_all)), ob(static_cast<size_t>(kQb * d.dv));
      for (int64_t h = h0; h < h1; ++h) {
        for (int64_t s = 0; s < n_all; ++s) {
          const float* kvs = &kv[(s * H + h) * hw];
          for (int64_t i = 0; i < d.dn; ++i) kt[i * n_all + s] = kvs[i];
          for (int64_t i = 0; i < d.dr; ++i) kt[(d.dn + i) * n_all + s] = crows[s * row + kvr + i];
        }
        for (int64_t t0 = 0; t0 < T; t0 += kQb) {
          const int64_t nq = std::min(kQb, T - t0), n_vis = n_past + t0 + nq;
          for (int64_t r = 0; r < nq; ++r)
            vec::scale(q + (t0 + r) * H * dq + h * dq, scale, &qs[r * dq], dq);
          vec::gemm_nn(qs.data(), dq, kt.data(), n_all, sc.data(), n_vis, nq, n_vis, dq, false);
          for (int64_t r = 0; r < nq; ++r) {
            const int64_t n_ctx = n_past + t0 + r + 1;  // causal
            float* pr = &sc[r * n_vis];
            vec::softmax(pr, n_ctx);
            std::fill(pr + n_ctx, pr + n_vis, 0.f);
          }
          vec::gemm_nn(sc.data(), n_vis, &kv[h * hw + d.dn], H * hw, ob.data(), d.dv, nq, d.dv,
                       n_vis, false);
          for (int64_t r = 0; r < nq; ++r)
            std::copy_n(&ob[r * d.dv], d.dv, o + (t0 + r) * H * d.dv + h * d.dv);
        }
      }
    });
    return;
  }
  parallel_for(H, grain_for_work(1, T * n_all * (row + kvr) + d.dn * kvr), [&](int64_t h0, int64_t h1) {
    std::vector<float> p(static_cast<size_t>(n_all)), qcat(static_cast<size_t>(row)), ctx(kvr),
        wrow(kvr);
    std::vector<uint16_t> wbits(kvr);
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const float* qh = q + t * H * dq + h * dq;
        float* oh = o + t * H * d.dv + h * d.dv;
        const int64_t n_ctx = n_past + t + 1;  // causal
        // qcat = scale·[W_kb,hᵀ q_nope ; q_rope] [kvr + dr]: rows of head h, each read once.
        std::fill(qcat.begin(), qcat.end(), 0.f);
        for (int64_t i = 0; i < d.dn; ++i) {
          std::memcpy(wbits.data(), kvb + ((h * hw + i) * kvr) * 2, kvr * 2);
          for (int64_t j = 0; j < kvr; ++j) wrow[j] = bf16_to_f32(wbits[j]);
          vec::axpy(qh[i] * scale, wrow.data(), qcat.data(), kvr);
        }
        vec::scale(qh + d.dn, scale, qcat.data() + kvr, d.dr);
        for (int64_t s = 0; s < n_ctx; ++s) p[s] = vec::dot(qcat.data(), crows + s * row, row);
        vec::softmax(p.data(), n_ctx);
        std::fill(ctx.begin(), ctx.end(), 0.f);
        for (int64_t s = 0; s < n_ctx; ++s) vec::axpy(p[s], crows + s * row, ctx.data(), kvr);
        // o = W_vb,h ctx [dv] (rows h·hw + dn .. + dv).
        matmul_bf16_raw(reinterpret_cast<const uint16_t*>(kvb) + (h * hw + d.dn) * kvr, d.dv, kvr,
                        kvr, ctx.data(), 1, oh, w.kv_b->name);
      }
  });
}

/// Oracle attention (fp64 dots) for T queries q [T, H, dn + dr] of one sequence over its
/// (already appended) cache into o [T, H, dv].
void mla_attend_ref(const MlaWeights& w, const MlaDims& d, const float* q, int64_t T,
                    const MlaCache& cache, int64_t n_past, bool absorbed, float scale, float* o) {
  const int64_t H = d.H, dq = d.dn + d.dr, row = d.row(), n_all = n_past + T;
  const float* crows = cache.rows.data();
  std::vector<float> p(n_all), q_abs(d.kv_rank), ctx(d.kv_rank);
  std::vector<float> kv;  // Expanded: [n_all, dn + dv] for one head
  for (int64_t h = 0; h < H; ++h) {
    if (!absorbed) {
      kv.resize(static_cast<size_t>(n_all * (d.dn + d.dv)));
      for (int64_t s = 0; s < n_all; ++s)
        ref::matvec_rows(*w.kv_b, h * (d.dn + d.dv), d.dn + d.dv, crows + s * row,
                         kv.data() + s * (d.dn + d.dv));
    }
    for (int64_t t = 0; t < T; ++t) {
      const float* qh = q + t * H * dq + h * dq;
      float* oh = o + t * H * d.dv + h * d.dv;
      const int64_t n_ctx = n_past + t + 1;  // causal
      if (absorbed)
        attend_absorbed(w, h, qh, crows, n_ctx, d, scale, p, q_abs, ctx, oh);
      else
        attend_expanded(qh, crows, kv.data(), n_ctx, d, scale, p, oh);
    }
  }
}

}  // namespace

void mla_forward(const MlaWeights& w, const MlaDims& d, const float* x, int64_t T, MlaCache& cache,
                 float* out, MlaMode mode, const ExecOptions& ex) {
  const SeqRows seg{0, T};
  MlaCache* cp = &cache;
  mla_forward_batch(w, d, x, std::span<const SeqRows>(&seg, 1), std::span<MlaCache* const>(&cp, 1),
                    out, mode, ex);
}

void mla_forward_batch(const MlaWeights& w, const MlaDims& d, const float* x,
                       std::span<const SeqRows> segs, std::span<MlaCache* const> caches, float* out,
                       MlaMode mode, const ExecOptions& ex) {
  const int64_t H = d.H, dq = d.dn + d.dr, row = d.row();
  if (segs.size() != caches.size() || segs.empty())
    throw Error("MLA batch: expected one cache per sequence, found " + std::to_string(caches.size()) +
                " caches for " + std::to_string(segs.size()) + " sequences");
  for (size_t s = 0; s < segs.size(); ++s) {
    if (segs[s].T < 1 || segs[s].row0 != (s == 0 ? 0 : segs[s - 1].row0 + segs[s - 1].T))
      throw Error("MLA batch: sequence " + std::to_string(s) + " rows do not follow the previous one");
    if (caches[s]->rows.size() % static_cast<size_t>(row) != 0)
      throw Error("MLA cache: size " + std::to_string(caches[s]->rows.size()) +
                  " is not a multiple of the row width " + std::to_string(row));
  }
  const int64_t T = total_rows(segs), S = static_cast<int64_t>(segs.size());

  // Token-parallel projections over every row of the batch.
  FBuf qa(T * d.q_rank), q(T * H * dq), ckv(T * row), gate(T * H * d.dv);
  auto mm = [&](const TensorView& wt, const float* in, float* y) {
    if (ex.fast)
      k3::matmul(wt, in, T, y);
    else
      ref::matmul(wt, in, T, y);
  };
  if (ex.fast) {  // the projections of x: one parallel region for decode (ops.h matmul_same_input)
    const TensorView* xs[3] = {w.q_a, w.kv_a, w.g_proj};
    float* ys[3] = {qa.data(), ckv.data(), gate.data()};
    k3::matmul_same_input(std::span<const TensorView* const>(xs, d.output_gate ? 3 : 2), x, T,
                          std::span<float* const>(ys, d.output_gate ? 3 : 2));
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
  mm(*w.q_b, qa.data(), q.data());
  if (!ex.fast) {
    mm(*w.kv_a, x, ckv.data());
    if (d.output_gate) mm(*w.g_proj, x, gate.data());
  }

  // Per sequence: append [RMSNorm(c), k_r] for each new token, then attend over its cache.
  // Auto: Absorbed for decode, and for prefill once the Expanded form's per-call k_nope/v
  // materialization ([n_all, H, dn + dv] fp32, re-done for every prefill chunk) would pass
  // kMaxExpandedBytes — at K3's widths that is 64 KiB per cached token (6.5 GB at 100k tokens).
  constexpr int64_t kMaxExpandedBytes = int64_t{256} << 20;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dq));  // NoPE: 1/sqrt(dn + dr), no mscale
  FBuf o(T * H * d.dv);
  auto run_seq = [&](int64_t s) {
    MlaCache& cache = *caches[s];
    const int64_t n_past = cache.n_tokens(d), Ts = segs[s].T, r0 = segs[s].row0;
    cache.rows.resize(static_cast<size_t>((n_past + Ts) * row));
    for (int64_t t = 0; t < Ts; ++t) {
      float* r = cache.rows.data() + (n_past + t) * row;
      const float* c = &ckv[(r0 + t) * row];
      if (ex.fast)
        vec::rmsnorm(c, w.kv_a_norm.data(), d.norm_eps, r, d.kv_rank);
      else
        ref::rmsnorm(c, d.kv_rank, w.kv_a_norm.data(), d.norm_eps, r);
      for (int64_t j = 0; j < d.dr; ++j) r[d.kv_rank + j] = c[d.kv_rank + j];
    }
    const int64_t n_all = n_past + Ts;
    const bool too_big = n_all * H * (d.dn + d.dv) * int64_t{4} > kMaxExpandedBytes;
    const bool absorbed = mode == MlaMode::Absorbed || (mode == MlaMode::Auto && (Ts == 1 || too_big)) ||
                          segs[s].per_token;
    if (ex.fast)
      mla_attend_fast(w, d, &q[r0 * H * dq], Ts, cache, n_past, absorbed, &o[r0 * H * d.dv]);
    else
      mla_attend_ref(w, d, &q[r0 * H * dq], Ts, cache, n_past, absorbed, scale, &o[r0 * H * d.dv]);
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
    k3::matmul(*w.o_proj, o.data(), T, out);
    return;
  }
  if (d.output_gate)
    for (size_t i = 0; i < o.size(); ++i) o[i] *= ref::sigmoid(gate[i]);
  ref::matmul(*w.o_proj, o.data(), T, out);
}

}  // namespace k3
