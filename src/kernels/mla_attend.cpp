#include "kernels/mla_attend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/bf16.h"
#include "kernels/ops.h"
#include "kernels/threads.h"
#include "kernels/vec.h"

namespace k3 {

namespace {
// fp32 scratch without zero-initialisation (every element is written before it is read).
struct Scratch {
  std::unique_ptr<float[]> p;
  explicit Scratch(int64_t n) : p(new float[static_cast<size_t>(n)]) {}
  float& operator[](int64_t i) { return p[static_cast<size_t>(i)]; }
  float* data() { return p.get(); }
};
}  // namespace

void mla_attend_expanded(const TensorView& kv_b, const MlaAttnShape& d, const float* q, int64_t T, const float* crows,
                         int64_t n_past, float* o) {
  const int64_t H = d.H, dq = d.dn + d.dr, row = d.kvr + d.dr, kvr = d.kvr, hw = d.dn + d.dv;
  const int64_t n_all = n_past + T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dq));
  Scratch c(n_all * kvr);
  for (int64_t s = 0; s < n_all; ++s) std::memcpy(&c[s * kvr], crows + s * row, kvr * sizeof(float));
  Scratch kv(n_all * H * hw);  // [n_all, H, dn + dv]
  k3::matmul(kv_b, c.data(), n_all, kv.data());
  // Per head: keys transposed to kt [dq, n_all] (k_nope from kv, k_rope from the cache); the
  // values are read in place (rows of kv, stride H·hw). Queries in blocks of kQb: scores
  // S = (scale·Q_blk)·kt over the keys the block can see, a causal softmax per row (later
  // keys get weight 0), then O_blk = S·V. Work per head ~ T·n_all·(dq + dv) multiply-adds
  // (causal: about half of it).
  constexpr int64_t kQb = 32;
  parallel_for(H, grain_for_work(1, T * n_all * (dq + d.dv) / 2), [&](int64_t h0, int64_t h1) {
    Scratch kt(dq * n_all), qs(kQb * dq), sc(kQb * n_all), ob(kQb * d.dv);
    for (int64_t h = h0; h < h1; ++h) {
      for (int64_t s = 0; s < n_all; ++s) {
        const float* kvs = &kv[(s * H + h) * hw];
        for (int64_t i = 0; i < d.dn; ++i) kt[i * n_all + s] = kvs[i];
        for (int64_t i = 0; i < d.dr; ++i) kt[(d.dn + i) * n_all + s] = crows[s * row + kvr + i];
      }
      for (int64_t t0 = 0; t0 < T; t0 += kQb) {
        const int64_t nq = std::min(kQb, T - t0), n_vis = n_past + t0 + nq;
        for (int64_t r = 0; r < nq; ++r) vec::scale(q + (t0 + r) * H * dq + h * dq, scale, &qs[r * dq], dq);
        vec::gemm_nn(qs.data(), dq, kt.data(), n_all, sc.data(), n_vis, nq, n_vis, dq, false);
        for (int64_t r = 0; r < nq; ++r) {
          const int64_t n_ctx = n_past + t0 + r + 1;  // causal
          float* pr = &sc[r * n_vis];
          vec::softmax(pr, n_ctx);
          std::fill(pr + n_ctx, pr + n_vis, 0.f);
        }
        vec::gemm_nn(sc.data(), n_vis, &kv[h * hw + d.dn], H * hw, ob.data(), d.dv, nq, d.dv, n_vis, false);
        for (int64_t r = 0; r < nq; ++r) std::copy_n(&ob[r * d.dv], d.dv, o + (t0 + r) * H * d.dv + h * d.dv);
      }
    }
  });
}

void mla_attend_absorbed(const MlaKvbHalves& kv_b, const MlaAttnShape& d, const float* q, int64_t T, const float* crows,
                         int64_t n_past, float* o) {
  const int64_t H = d.H, dq = d.dn + d.dr, row = d.kvr + d.dr, kvr = d.kvr;
  const int64_t n_all = n_past + T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dq));
  parallel_for(H, grain_for_work(1, T * n_all * (row + kvr) + d.dn * kvr), [&](int64_t h0, int64_t h1) {
    std::vector<float> p(static_cast<size_t>(n_all)), qcat(static_cast<size_t>(row)), ctx(kvr), wrow(kvr);
    std::vector<uint16_t> wbits(kvr);  // one W_kb row (the mapping may be unaligned: memcpy)
    for (int64_t h = h0; h < h1; ++h) {
      const uint16_t* wk = kv_b.k_nope + h * kv_b.head_stride;  // W_kb,h [dn, kvr]
      const uint16_t* wv = kv_b.v + h * kv_b.head_stride;       // W_vb,h [dv, kvr]
      for (int64_t t = 0; t < T; ++t) {
        const float* qh = q + t * H * dq + h * dq;
        float* oh = o + t * H * d.dv + h * d.dv;
        const int64_t n_ctx = n_past + t + 1;  // causal
        // qcat = scale·[W_kb,hᵀ q_nope ; q_rope] [kvr + dr]: rows of head h, each read once.
        std::fill(qcat.begin(), qcat.end(), 0.f);
        for (int64_t i = 0; i < d.dn; ++i) {
          std::memcpy(wbits.data(), wk + i * kvr, kvr * sizeof(uint16_t));
          for (int64_t j = 0; j < kvr; ++j) wrow[j] = bf16_to_f32(wbits[j]);
          vec::axpy(qh[i] * scale, wrow.data(), qcat.data(), kvr);
        }
        vec::scale(qh + d.dn, scale, qcat.data() + kvr, d.dr);
        for (int64_t s = 0; s < n_ctx; ++s) p[s] = vec::dot(qcat.data(), crows + s * row, row);
        vec::softmax(p.data(), n_ctx);
        std::fill(ctx.begin(), ctx.end(), 0.f);
        for (int64_t s = 0; s < n_ctx; ++s) vec::axpy(p[s], crows + s * row, ctx.data(), kvr);
        matmul_bf16_raw(wv, d.dv, kvr, kvr, ctx.data(), 1, oh, kv_b.name);  // o = W_vb,h ctx [dv]
      }
    }
  });
}

}  // namespace k3
