#include "model/latent_moe.h"

#include <algorithm>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "io/tensor_table.h"
#include "kernels/op_profile.h"
#include "kernels/ops.h"
#include "kernels/ref/activations.h"
#include "kernels/ref/linear.h"
#include "kernels/ref/mxfp4_linear.h"
#include "kernels/ref/norms.h"
#include "kernels/threads.h"
#include "kernels/vec.h"
#include "model/buffer.h"
#include "model/router.h"
#include "model/split.h"

namespace k3 {

MoeDims MoeDims::from(const ModelConfig& c) {
  MoeDims d;
  d.D = c.hidden_size;
  d.E = c.num_experts;
  d.L = c.routed_expert_hidden_size;
  d.Im = c.moe_intermediate_size;
  d.k = c.num_experts_per_token;
  d.renormalize = c.moe_renormalize && d.k > 1;
  d.scaling = c.routed_scaling_factor;
  d.rms_eps = c.rms_norm_eps;
  if (c.num_expert_group > 1)
    throw Error("config: num_expert_group = " + std::to_string(c.num_expert_group) +
                " (grouped top-k) is not supported; K3 uses 1");
  if (d.k < 1 || d.k > d.E)
    throw Error("config: num_experts_per_token = " + std::to_string(d.k) +
                " outside [1, num_experts = " + std::to_string(d.E) + "]");
  return d;
}

namespace {

/// The checkpoint name of routed expert `e`'s matrix `role` in this layer (an Mxfp4 base, e.g.
/// "language_model.model.layers.1.block_sparse_moe.experts.7.w1"), from the tensor table.
std::string expert_matrix_name(const MoeWeights& w, TensorRole role, int64_t e) {
  return w.name_prefix + tensor_name(role, w.layer, static_cast<int>(e));
}

/// The name of routed expert `e` itself: its matrices' names without the matrix part
/// ("...experts.7"), as mxfp4_glu_ffn names the expert and its w1/w3/w2.
std::string expert_name(const MoeWeights& w, int64_t e) {
  std::string s = expert_matrix_name(w, TensorRole::ExpertW1, e);
  s.resize(s.rfind('.'));
  return s;
}

/// Rank r's expert-id block of this layer: split_range(E, ranks, r) under w.comm, else all ids.
IndexRange expert_block(const MoeWeights& w, int64_t E, int r) {
  if (!w.comm || w.comm->size() == 1) return {0, E};
  return split_range(E, w.comm->size(), r);
}

/// The shared experts under the column split (MoeWeights::shared with down null): this rank's
/// activations `a` [T, I_r] -> the shared output [T, D] (model/split.h).
void shared_split_out(const MoeWeights& w, const float* a, int64_t T, int64_t D, bool fast, float* out) {
  const TensorView& rows = *w.shared->down_rows;
  split_output_rows(*w.comm, a, T, rows.shape[1], 1, kSplitRowUnit, rows, D, fast, out);
}

/// Fast path of latent_moe_forward (see the header).
void latent_moe_fast(const MoeWeights& w, const MoeDims& dm, const GluActivation& act, const float* x, int64_t T,
                     float* out, int32_t* topk_ids, float* topk_w, const ExecOptions& ex, const MoePrefetch* prefetch) {
  const int64_t D = dm.D, E = dm.E, L = dm.L;
  const int k = dm.k;
  // 1–3. Router for every token: s = σ(W_gate x) [T, E], then per-token top-k.
  // The products of x: router logits [T, E], the latent down-projection z [T, L] (step 4) and
  // the shared experts' gate and up [T, I] (steps 7–8), in one parallel region for decode
  // (ops.h matmul_same_input; the same bits as one product at a time).
  FBuf logits(static_cast<size_t>(T * E));
  FBuf z(static_cast<size_t>(T * L));
  std::vector<float> sg, su;  // shared experts' gate and up
  {
    std::vector<const TensorView*> xs = {w.router, w.down};
    std::vector<float*> ys = {logits.data(), z.data()};
    if (w.shared) {
      const int64_t I = w.shared->gate->shape[0];
      sg.resize(static_cast<size_t>(T * I));
      su.resize(sg.size());
      if (I > 0) {  // a rank without shared-expert columns (split) has none to compute
        xs.insert(xs.end(), {w.shared->gate, w.shared->up});
        ys.insert(ys.end(), {sg.data(), su.data()});
      }
    }
    k3::matmul_same_input(xs, x, T, ys);
  }
  std::vector<int32_t> ids(static_cast<size_t>(T * k));
  std::vector<float> wts(static_cast<size_t>(T * k));
  vec::sigmoid(logits.data(), logits.data(), T * E);
  for (int64_t t = 0; t < T; ++t)
    router_select_topk(std::span<const float>(&logits[t * E], E), w.bias, k, dm.renormalize, dm.scaling,
                       std::span<int32_t>(&ids[t * k], k), std::span<float>(&wts[t * k], k));
  // 4. Latent down-projection for the whole block: z, above.
  // 5–6. Group tokens by expert (ascending ids); the selected experts run in parallel, each on
  // its group's rows (written to its own slice of yall), then a serial scatter-add in expert
  // order, so the sum does not depend on the thread count.
  std::vector<std::vector<std::pair<int64_t, float>>> groups(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t)
    for (int i = 0; i < k; ++i) groups[ids[t * k + i]].push_back({t, wts[t * k + i]});
  std::vector<int64_t> active, offset;  // active expert ids; first row of each in yall
  int64_t rows = 0;
  for (int64_t e = 0; e < E; ++e)
    if (!groups[e].empty()) {
      active.push_back(e);
      offset.push_back(rows);
      rows += static_cast<int64_t>(groups[e].size());
    }
  std::vector<float> acc(static_cast<size_t>(T * L), 0.f);
  FBuf yall(static_cast<size_t>(rows * L));
  const GluAct ga = to_glu_act(act);
  const int64_t n_active = static_cast<int64_t>(active.size());
  const int64_t work_per_expert = (rows / std::max<int64_t>(1, n_active) + 1) * 3 * L * dm.Im;
  // Across experts only when there are enough of them to keep every thread busy; otherwise
  // (decode with fewer selected experts than threads) each expert's GEMMs split rows instead.
  // Runs active experts [b, e) (positions in `active`), in parallel across experts only when
  // there are enough of them to keep every thread busy; otherwise (decode with fewer selected
  // experts than threads) each expert's GEMMs split rows instead. With a lease (streamed
  // experts, positions b.. are its entries 0..), the resident experts compute first while the
  // others are still read. Each expert writes only its own slice of yall, so neither the order
  // nor the grouping changes a bit of the result.
  auto run_experts = [&](int64_t b, int64_t e, const ExpertStore::Lease* lease) {
    const int64_t n_g = e - b;
    std::vector<int64_t> order(static_cast<size_t>(n_g));
    for (int64_t i = 0; i < n_g; ++i) order[static_cast<size_t>(i)] = b + i;
    if (lease)
      std::stable_partition(order.begin(), order.end(),
                            [&](int64_t a) { return lease->ready(static_cast<size_t>(a - b)); });
    const int64_t expert_grain = n_g >= 2 * num_threads() ? grain_for_work(1, work_per_expert) : n_g;
    parallel_for(n_g, expert_grain, [&](int64_t i0, int64_t i1) {
      FBuf zg;
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t a = order[static_cast<size_t>(i)];
        const int64_t ei = active[a];
        const auto& grp = groups[ei];
        const int64_t n = static_cast<int64_t>(grp.size());
        zg.resize(static_cast<size_t>(n * L));
        for (int64_t r = 0; r < n; ++r) std::copy_n(&z[grp[r].first * L], L, &zg[r * L]);
        ExpertWeights exw;
        if (lease) {
          const ExpertMatrices& m = lease->wait(static_cast<size_t>(a - b));
          exw = {m.w1, m.w2, m.w3};
        } else {
          exw = w.experts[ei];
        }
        mxfp4_glu_ffn(exw.w1, exw.w3, exw.w2, zg.data(), n, ga, &yall[offset[a] * L], ex.mxfp4, expert_name(w, ei));
      }
    });
  };
  // Under N ranks (w.comm) this rank runs the active experts of its id block only, positions
  // [a0, a1) of `active`, whose rows are one contiguous slice of yall; the all-gather below
  // fills the other ranks' slices, so the combine reads the same yall as one process.
  const auto held = [&](int r) {
    const IndexRange ids_r = expert_block(w, E, r);
    const auto lo = std::lower_bound(active.begin(), active.end(), ids_r.begin);
    const auto hi = std::lower_bound(active.begin(), active.end(), ids_r.end);
    return IndexRange{lo - active.begin(), hi - active.begin()};
  };
  const int me = w.comm ? w.comm->rank() : 0;
  const IndexRange mine = held(me);
  const int64_t a0 = mine.begin, a1 = mine.end;
  // Per-op timer (k3 bench --profile): w1, w3 [Im, L] and w2 [L, Im] in MXFP4, 17/32 byte per
  // weight (a nibble plus one E8M0 byte per 32).
  {
    const prof::Scope timer("block_sparse_moe.routed_experts",
                            static_cast<double>(a1 - a0) * 3.0 * static_cast<double>(L * dm.Im) * 17.0 / 32.0);
    if (!w.store) {
      run_experts(a0, a1, nullptr);
    } else {
      // Streamed: the chunk's distinct experts in groups of G, the next group's reads queued
      // before this group computes, so at most 2·G experts are pinned (a prefill chunk may select
      // every expert of the layer; decode selects k <= G: one group).
      const int64_t G = moe_stream_group(k);
      auto acquire = [&](int64_t b) {
        return w.store->acquire(w.layer, std::span<const int64_t>(active.data() + b, std::min(G, a1 - b)));
      };
      ExpertStore::Lease cur;
      if (a0 < a1) cur = acquire(a0);
      if (prefetch) w.store->prefetch(prefetch->layer, prefetch->ids);
      for (int64_t b = a0; b < a1; b += G) {
        ExpertStore::Lease next;
        if (b + G < a1) next = acquire(b + G);
        run_experts(b, std::min(b + G, a1), &cur);
        cur = std::move(next);
      }
    }
  }
  if (w.comm && w.comm->size() > 1) {
    const int n = w.comm->size();
    std::vector<int64_t> counts(static_cast<size_t>(n));
    const auto row_of = [&](int64_t a) { return a < n_active ? offset[a] : rows; };
    for (int r = 0; r < n; ++r) {
      const IndexRange h = r == me ? mine : held(r);
      counts[r] = (row_of(h.end) - row_of(h.begin)) * L * static_cast<int64_t>(sizeof(float));
    }
    const prof::Scope timer("block_sparse_moe.allgather", 0.0);
    w.comm->allgatherv(yall.data() + row_of(a0) * L, counts, yall.data());
  }
  for (int64_t a = 0; a < n_active; ++a) {
    const auto& grp = groups[active[a]];
    for (size_t r = 0; r < grp.size(); ++r)
      vec::axpy(grp[r].second, &yall[(offset[a] + static_cast<int64_t>(r)) * L], &acc[grp[r].first * L], L);
  }
  if (!w.latent_norm.empty())
    for (int64_t t = 0; t < T; ++t) vec::rmsnorm(&acc[t * L], w.latent_norm.data(), dm.rms_eps, &acc[t * L], L);
  // 7–8. Up-projection for the whole block plus the shared experts.
  k3::matmul(*w.up, acc.data(), T, out);
  if (w.shared) {  // glu_mlp_forward's fast path on the gate and up computed above
    std::vector<float> shared(static_cast<size_t>(T * D));
    glu_activation(sg.data(), su.data(), sg.data(), static_cast<int64_t>(sg.size()), ga);
    if (w.shared->down) k3::matmul(*w.shared->down, sg.data(), T, shared.data());
    else shared_split_out(w, sg.data(), T, D, true, shared.data());
    for (int64_t i = 0; i < T * D; ++i) out[i] += shared[i];
  }
  if (topk_ids) std::copy(ids.begin(), ids.end(), topk_ids);
  if (topk_w) std::copy(wts.begin(), wts.end(), topk_w);
}

}  // namespace

std::vector<int64_t> predict_moe_experts(const MoeWeights& w, const MoeDims& dm, std::span<const float> post_norm,
                                         const float* h, int64_t T, IndexRange block, int64_t cap) {
  const int64_t D = dm.D, E = dm.E;
  const int k = dm.k;
  FBuf xn(static_cast<size_t>(T * D));
  for (int64_t t = 0; t < T; ++t) vec::rmsnorm(h + t * D, post_norm.data(), dm.rms_eps, &xn[t * D], D);
  FBuf logits(static_cast<size_t>(T * E));
  k3::matmul(*w.router, xn.data(), T, logits.data());
  vec::sigmoid(logits.data(), logits.data(), T * E);
  std::vector<char> chosen(static_cast<size_t>(E), 0);
  std::vector<int32_t> ids(static_cast<size_t>(k));
  std::vector<float> wts(static_cast<size_t>(k));
  for (int64_t t = 0; t < T; ++t) {
    router_select_topk(std::span<const float>(&logits[t * E], E), w.bias, k, dm.renormalize, dm.scaling, ids, wts);
    for (int32_t e : ids) chosen[static_cast<size_t>(e)] = 1;
  }
  std::vector<int64_t> out;
  for (int64_t e = block.begin; e < block.end && static_cast<int64_t>(out.size()) < cap; ++e)
    if (chosen[static_cast<size_t>(e)]) out.push_back(e);
  return out;
}

void latent_moe_forward(const MoeWeights& w, const MoeDims& dm, const GluActivation& act, const float* x, int64_t T,
                        float* out, int32_t* topk_ids, float* topk_w, const ExecOptions& ex,
                        const MoePrefetch* prefetch) {
  const int64_t D = dm.D, E = dm.E, L = dm.L, Im = dm.Im;
  const int k = dm.k;
  if (prefetch && !w.store) prefetch = nullptr;
  if (ex.fast) return latent_moe_fast(w, dm, act, x, T, out, topk_ids, topk_w, ex, prefetch);
  if (prefetch) w.store->prefetch(prefetch->layer, prefetch->ids);
  std::vector<float> logits(E), g(Im), u(Im), acc(L);
  std::vector<int32_t> ids(static_cast<size_t>(T * k));
  std::vector<float> wts(static_cast<size_t>(T * k));
  std::vector<float> z(static_cast<size_t>(T * L));
  std::vector<float> y(static_cast<size_t>(T * k * L));  // [T, k, L] the selected experts' outputs
  std::vector<float> shared;
  if (w.shared) {
    shared.resize(static_cast<size_t>(T * D));
    if (w.shared->down) {
      glu_mlp_forward(*w.shared, act, x, T, shared.data());
    } else {
      std::vector<float> a(static_cast<size_t>(T * w.shared->gate->shape[0]));
      if (!a.empty()) glu_mlp_forward(*w.shared, act, x, T, a.data());
      shared_split_out(w, a.data(), T, D, false, shared.data());
    }
  }
  const int me = w.comm ? w.comm->rank() : 0;
  const IndexRange mine = expert_block(w, E, me);
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * D;
    const std::span<int32_t> ids_t(&ids[t * k], k);
    const std::span<float> wts_t(&wts[t * k], k);
    // 1. Router in fp32: s = σ(W_gate x).
    ref::matvec(*w.router, xt, logits.data());
    ref::sigmoid_inplace(logits.data(), E);
    // 2–3. Selection on biased scores; weights from the unbiased ones.
    router_select_topk(logits, w.bias, k, dm.renormalize, dm.scaling, ids_t, wts_t);
    // 4. Latent down-projection shared by all routed experts.
    float* zt = &z[t * L];
    ref::matvec(*w.down, xt, zt);
    // 5. The selected experts this rank holds (all of them in one process).
    std::vector<int> sel;  // positions i of ids_t held here
    for (int i = 0; i < k; ++i)
      if (mine.contains(ids_t[i])) sel.push_back(i);
    ExpertStore::Lease lease;  // streamed experts: this token's held experts, read in parallel
    if (w.store && !sel.empty()) {
      std::vector<int64_t> want;
      for (int i : sel) want.push_back(ids_t[i]);
      lease = w.store->acquire(w.layer, want);
    }
    for (size_t j = 0; j < sel.size(); ++j) {
      const int i = sel[j];
      ExpertWeights streamed;
      if (w.store) {
        const ExpertMatrices& m = lease.wait(j);
        streamed = {m.w1, m.w2, m.w3};
      }
      const ExpertWeights& exw = w.store ? streamed : w.experts[ids_t[i]];
      const auto scale_name = [&](TensorRole role) { return expert_matrix_name(w, role, ids_t[i]) + ".weight_scale"; };
      ref::matvec_mxfp4(exw.w1, zt, g.data(), scale_name(TensorRole::ExpertW1));
      ref::matvec_mxfp4(exw.w3, zt, u.data(), scale_name(TensorRole::ExpertW3));
      for (int64_t c = 0; c < Im; ++c) g[c] = act(g[c], u[c]);
      ref::matvec_mxfp4(exw.w2, g.data(), &y[(t * k + i) * L], scale_name(TensorRole::ExpertW2));
    }
  }
  // Under N ranks: every rank's expert outputs, packed in (token, position) order per rank,
  // all-gathered and put back at their [t, i] rows, so every rank combines all k of them.
  if (w.comm && w.comm->size() > 1) {
    const int n = w.comm->size();
    std::vector<int64_t> counts(static_cast<size_t>(n), 0);
    std::vector<int> owner(static_cast<size_t>(T * k));
    for (int64_t j = 0; j < T * k; ++j) {
      owner[j] = split_owner(E, n, ids[j]);
      counts[owner[j]] += L * static_cast<int64_t>(sizeof(float));
    }
    std::vector<float> packed, gathered(static_cast<size_t>(T * k * L));
    for (int64_t j = 0; j < T * k; ++j)
      if (owner[j] == me) packed.insert(packed.end(), &y[j * L], &y[j * L] + L);
    w.comm->allgatherv(packed.data(), counts, gathered.data());
    std::vector<int64_t> cursor(static_cast<size_t>(n), 0);  // next row of each rank's piece
    for (int r = 1; r < n; ++r) cursor[r] = cursor[r - 1] + counts[r - 1] / static_cast<int64_t>(sizeof(float));
    for (int64_t j = 0; j < T * k; ++j) {
      std::copy_n(&gathered[cursor[owner[j]]], L, &y[j * L]);
      cursor[owner[j]] += L;
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    // 6. Weighted sum of expert outputs in the latent space, in the router's order.
    std::fill(acc.begin(), acc.end(), 0.f);
    for (int i = 0; i < k; ++i) {
      const float* yi = &y[(t * k + i) * L];
      for (int64_t j = 0; j < L; ++j) acc[j] += wts[t * k + i] * yi[j];
    }
    if (!w.latent_norm.empty()) ref::rmsnorm(acc.data(), L, w.latent_norm.data(), dm.rms_eps, acc.data());
    // 7–8. Up-projection plus the shared experts on the full-width x.
    ref::matvec(*w.up, acc.data(), out + t * D);
    if (w.shared)
      for (int64_t j = 0; j < D; ++j) out[t * D + j] += shared[t * D + j];
  }
  if (topk_ids) std::copy(ids.begin(), ids.end(), topk_ids);
  if (topk_w) std::copy(wts.begin(), wts.end(), topk_w);
}

}  // namespace k3
