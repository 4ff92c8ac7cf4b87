#include "kernels/mla_attend.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/threads.h"
#include "kernels/vec.h"

namespace k3 {

namespace {
// fp32 scratch without zero-initialisation (every element is written before it is read).
struct Scratch {
  std::unique_ptr<float[]> p;
  explicit Scratch(int64_t n) : p(new float[static_cast<size_t>(std::max<int64_t>(n, 1))]) {}
  float& operator[](int64_t i) { return p[static_cast<size_t>(i)]; }
  float* data() { return p.get(); }
};

constexpr int64_t kFp8Group = kMlaFp8Group;
constexpr float kE4M3Max = 448.0f;      // largest finite E4M3 value
constexpr int64_t kKeyTile = 128;       // prefill: cache rows per tile
constexpr int64_t kQueryBlock = 32;     // prefill: queries per score block
constexpr int64_t kSegTiles = 8;        // prefill: tiles per segment (a parallel work item per head)
constexpr int64_t kMinPrefillTasks = 16;  // prefill: (head, segment) work items per wave
constexpr int64_t kDecodeSub = 128;     // decode: rows scored together inside a chunk

// E4M3 (OCP FP8, bias 7, no infinities, 0x7F/0xFF NaN) decoded values of the 256 codes.
const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> v{};
    for (int c = 0; c < 256; ++c) {
      const int e = (c >> 3) & 15, m = c & 7;
      float a = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
      if (e == 15 && m == 7) a = std::numeric_limits<float>::quiet_NaN();
      v[static_cast<size_t>(c)] = (c & 0x80) ? -a : a;
    }
    return v;
  }();
  return t;
}

// Round-to-nearest-even onto the E4M3 grid, saturating at ±448; NaN -> 0x7F.
uint8_t e4m3_rne(float v) {
  if (std::isnan(v)) return 0x7F;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const float a = std::fabs(v);
  if (a >= kE4M3Max) return sign | 0x7E;
  if (a < 0.015625f) return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));  // subnormals, step 2^-9
  int ex = 0;
  std::frexp(a, &ex);
  int e = ex - 1;  // a in [2^e, 2^(e+1)), e in [-6, 8]
  int q = static_cast<int>(std::nearbyint(std::ldexp(a, -e) * 8.0f));  // 8..16
  if (q == 16) q = 8, ++e;
  if (e > 8 || (e == 8 && q > 14)) return sign | 0x7E;
  return static_cast<uint8_t>(sign | ((e + 7) << 3) | (q - 8));
}

int64_t fp8_groups(int64_t kvr) { return (kvr + kFp8Group - 1) / kFp8Group; }

// Rows [s0, s0 + n) as fp32 [n, kvr + dr]: in place for F32, else decoded into dst.
const float* rows_f32(const MlaRows& r, int64_t s0, int64_t n, int64_t kvr, int64_t dr, float* dst) {
  const int64_t rb = mla_cache_row_bytes(r.type, kvr, dr);
  if (r.type == MlaCacheType::F32) return reinterpret_cast<const float*>(r.data + s0 * rb);
  mla_cache_decode(r.type, r.data + s0 * rb, n, kvr, dr, dst);
  return dst;
}

// bf16 bits at p[i] (the mapping may be unaligned: memcpy).
inline float bf16_at(const uint16_t* p, int64_t i) {
  uint16_t b;
  std::memcpy(&b, p + i, sizeof b);
  return bf16_to_f32(b);
}
}  // namespace

void mla_cache_encode(MlaCacheType t, const float* x, int64_t n, int64_t kvr, int64_t dr, uint8_t* out) {
  const int64_t row = kvr + dr, rb = mla_cache_row_bytes(t, kvr, dr);
  for (int64_t s = 0; s < n; ++s) {
    const float* xs = x + s * row;
    uint8_t* os = out + s * rb;
    if (t == MlaCacheType::F32) {
      std::memcpy(os, xs, static_cast<size_t>(rb));
    } else if (t == MlaCacheType::BF16) {
      for (int64_t i = 0; i < row; ++i) {
        const uint16_t b = f32_to_bf16(xs[i]);
        std::memcpy(os + 2 * i, &b, 2);
      }
    } else {
      const int64_t ng = fp8_groups(kvr);
      uint8_t* scales = os + kvr;
      for (int64_t g = 0; g < ng; ++g) {
        const int64_t i0 = g * kFp8Group, i1 = std::min(kvr, i0 + kFp8Group);
        float amax = 0.0f;
        bool finite = true;
        for (int64_t i = i0; i < i1; ++i) {
          finite = finite && std::isfinite(xs[i]);
          amax = std::max(amax, std::fabs(xs[i]));
        }
        const float sc = !finite ? std::numeric_limits<float>::quiet_NaN() : amax / kE4M3Max;
        for (int64_t i = i0; i < i1; ++i) os[i] = sc > 0.0f ? e4m3_rne(xs[i] / sc) : (sc == 0.0f ? 0 : 0x7F);
        std::memcpy(scales + 4 * g, &sc, 4);
      }
      uint8_t* kr = scales + 4 * ng;
      for (int64_t i = 0; i < dr; ++i) {
        const uint16_t b = f32_to_bf16(xs[kvr + i]);
        std::memcpy(kr + 2 * i, &b, 2);
      }
    }
  }
}

void mla_cache_decode(MlaCacheType t, const uint8_t* rows, int64_t n, int64_t kvr, int64_t dr, float* out) {
  const int64_t row = kvr + dr, rb = mla_cache_row_bytes(t, kvr, dr);
  if (t == MlaCacheType::F32) {
    std::memcpy(out, rows, static_cast<size_t>(n * rb));
    return;
  }
  if (t == MlaCacheType::BF16) {
    for (int64_t s = 0; s < n; ++s) {
      const uint8_t* rs = rows + s * rb;
      float* os = out + s * row;
      for (int64_t i = 0; i < row; ++i) {
        uint16_t b;
        std::memcpy(&b, rs + 2 * i, 2);
        os[i] = bf16_to_f32(b);
      }
    }
    return;
  }
  const std::array<float, 256>& lut = e4m3_table();
  const int64_t ng = fp8_groups(kvr);
  for (int64_t s = 0; s < n; ++s) {
    const uint8_t* rs = rows + s * rb;
    float* os = out + s * row;
    for (int64_t g = 0; g < ng; ++g) {
      float sc;
      std::memcpy(&sc, rs + kvr + 4 * g, 4);
      const int64_t i0 = g * kFp8Group, i1 = std::min(kvr, i0 + kFp8Group);
      for (int64_t i = i0; i < i1; ++i) os[i] = lut[rs[i]] * sc;
    }
    const uint8_t* kr = rs + kvr + 4 * ng;
    for (int64_t i = 0; i < dr; ++i) {
      uint16_t b;
      std::memcpy(&b, kr + 2 * i, 2);
      os[kvr + i] = bf16_to_f32(b);
    }
  }
}

int64_t mla_decode_chunk(int64_t n_ctx) {
  const int64_t per = (n_ctx + 63) / 64;  // at most 64 chunks
  return std::max<int64_t>(512, (per + 255) / 256 * 256);
}

void mla_attend_expanded(const MlaKvbHalves& kv_b, const MlaAttnShape& d, const float* q, int64_t T,
                         const MlaRows& rows, int64_t n_past, float* o) {
  const int64_t H = d.H, dn = d.dn, dr = d.dr, dv = d.dv, dq = dn + dr, row = d.kvr + dr, kvr = d.kvr, hw = dn + dv;
  if (H == 0 || T == 0) return;
  const int64_t n_all = n_past + T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dq));
  // W_h^T [kvr, dn + dv] per head, fp32 (exact widening of kv_b): one GEMM per tile expands
  // [k_nope | v] of every tile row.
  Scratch wt(H * kvr * hw);
  parallel_for(H, 1, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t i = 0; i < hw; ++i) {
        const uint16_t* src = (i < dn ? kv_b.k_nope + i * kvr : kv_b.v + (i - dn) * kvr) + h * kv_b.head_stride;
        for (int64_t c = 0; c < kvr; ++c) wt[(h * kvr + c) * hw + i] = bf16_at(src, c);
      }
  });
  // Scaled queries per head: qs [H, T, dq].
  Scratch qs(H * T * dq);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < T; ++t) vec::scale(q + (t * H + h) * dq, scale, &qs[(h * T + t) * dq], dq);

  // Segments of kSegTiles tiles at absolute positions (row 0 starts segment 0), so a query's
  // result does not depend on how the prompt was cut into calls; waves of kWaveSegs segments
  // run in parallel as (head, segment) items, each keeping a running max, sum and unnormalized
  // output per query; after each wave the segments are merged into the running result in order.
  const int64_t n_tiles = (n_all + kKeyTile - 1) / kKeyTile;
  const int64_t n_seg = (n_tiles + kSegTiles - 1) / kSegTiles;
  const int64_t wave = std::min(n_seg, std::max<int64_t>(1, (kMinPrefillTasks + H - 1) / H));
  Scratch po(H * wave * T * dv), pm(H * wave * T), pl(H * wave * T);
  Scratch ro(T * H * dv), rm(T * H), rl(T * H);
  std::fill(ro.data(), ro.data() + T * H * dv, 0.0f);
  std::fill(rm.data(), rm.data() + T * H, -std::numeric_limits<float>::infinity());
  std::fill(rl.data(), rl.data() + T * H, 0.0f);
  const int64_t work_per_task = T * kSegTiles * kKeyTile * (dq + dv);
  for (int64_t g0 = 0; g0 < n_seg; g0 += wave) {
    const int64_t nw = std::min(wave, n_seg - g0);
    parallel_for(H * nw, grain_for_work(1, work_per_task), [&](int64_t a0, int64_t a1) {
      Scratch ctile(kKeyTile * row), kv(kKeyTile * hw), kt(dq * kKeyTile), sc(kQueryBlock * kKeyTile);
      for (int64_t a = a0; a < a1; ++a) {
        const int64_t h = a / nw, g = g0 + a % nw;
        float* O = &po[a * T * dv];
        float* M = &pm[a * T];
        float* L = &pl[a * T];
        std::fill(O, O + T * dv, 0.0f);
        std::fill(M, M + T, -std::numeric_limits<float>::infinity());
        std::fill(L, L + T, 0.0f);
        const float* qh = &qs[h * T * dq];
        const float* wh = &wt[h * kvr * hw];
        for (int64_t tile = g * kSegTiles; tile < std::min(n_tiles, (g + 1) * kSegTiles); ++tile) {
          const int64_t s0 = tile * kKeyTile, nk = std::min(kKeyTile, n_all - s0);
          const float* c = rows_f32(rows, s0, nk, kvr, dr, ctile.data());
          // [k_nope | v] of the tile's rows: kv [nk, hw] = c[:, :kvr] · W_h^T.
          vec::gemm_nn(c, row, wh, hw, kv.data(), hw, nk, hw, kvr, false);
          // Keys transposed: kt [dq, nk] (leading dim kKeyTile) = [k_nope ; k_r]^T.
          for (int64_t j = 0; j < nk; ++j) {
            for (int64_t i = 0; i < dn; ++i) kt[i * kKeyTile + j] = kv[j * hw + i];
            for (int64_t i = 0; i < dr; ++i) kt[(dn + i) * kKeyTile + j] = c[j * row + kvr + i];
          }
          const int64_t tq0 = std::max<int64_t>(0, s0 - n_past);  // first query that sees row s0
          for (int64_t qb = tq0 / kQueryBlock * kQueryBlock; qb < T; qb += kQueryBlock) {
            const int64_t nq = std::min(kQueryBlock, T - qb);
            vec::gemm_nn(qh + qb * dq, dq, kt.data(), kKeyTile, sc.data(), kKeyTile, nq, nk, dq, false);
            for (int64_t r = 0; r < nq; ++r) {
              const int64_t t = qb + r, vis = std::min(nk, n_past + t + 1 - s0);  // causal
              float* sr = &sc[r * kKeyTile];
              if (vis <= 0) {
                std::fill(sr, sr + nk, 0.0f);
                continue;
              }
              const float alpha = vec::softmax_online(sr, vis, nk, &M[t], &L[t]);
              if (alpha != 1.0f) vec::scale(O + t * dv, alpha, O + t * dv, dv);
            }
            vec::gemm_nn(sc.data(), kKeyTile, kv.data() + dn, hw, O + qb * dv, dv, nq, dv, nk, true);
          }
        }
      }
    });
    // Merge the wave's segments into the running result, in segment order.
    parallel_for(T, grain_for_work(1, H * nw * dv), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t h = 0; h < H; ++h) {
          float* RO = &ro[(t * H + h) * dv];
          float& RM = rm[t * H + h];
          float& RL = rl[t * H + h];
          for (int64_t gi = 0; gi < nw; ++gi) {
            const int64_t a = h * nw + gi;
            const float lg = pl[a * T + t], mg = pm[a * T + t];
            if (lg == 0.0f) continue;  // the segment holds no row this query sees
            const float m = std::max(RM, mg), fr = std::exp(RM - m), fg = std::exp(mg - m);
            if (fr != 1.0f) vec::scale(RO, fr, RO, dv);
            vec::axpy(fg, &po[(a * T + t) * dv], RO, dv);
            RL = RL * fr + lg * fg;
            RM = m;
          }
        }
    });
  }
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) vec::scale(&ro[(t * H + h) * dv], 1.0f / rl[t * H + h], o + (t * H + h) * dv, dv);
}

void mla_attend_absorbed(const MlaKvbHalves& kv_b, const MlaAttnShape& d, const float* q, int64_t T,
                         const MlaRows& rows, int64_t n_past, float* o) {
  const int64_t H = d.H, dq = d.dn + d.dr, row = d.kvr + d.dr, kvr = d.kvr;
  if (H == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dq));
  Scratch qcat(H * row), ctx(H * kvr);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n_ctx = n_past + t + 1;  // causal
    // qcat_h = scale·[W_kb,hᵀ q_nope ; q_rope] [kvr + dr]: rows of head h, each read once.
    parallel_for(H, grain_for_work(1, d.dn * kvr), [&](int64_t h0, int64_t h1) {
      std::vector<float> wrow(static_cast<size_t>(kvr));
      for (int64_t h = h0; h < h1; ++h) {
        const uint16_t* wk = kv_b.k_nope + h * kv_b.head_stride;  // W_kb,h [dn, kvr]
        const float* qh = q + (t * H + h) * dq;
        float* qc = &qcat[h * row];
        std::fill(qc, qc + kvr, 0.0f);
        for (int64_t i = 0; i < d.dn; ++i) {
          for (int64_t j = 0; j < kvr; ++j) wrow[j] = bf16_at(wk + i * kvr, j);
          vec::axpy(qh[i] * scale, wrow.data(), qc, kvr);
        }
        vec::scale(qh + d.dn, scale, qc + kvr, d.dr);
      }
    });
    // Flash-decoding: chunks of cs rows, per chunk and head a running max, sum and context.
    const int64_t cs = mla_decode_chunk(n_ctx), n_ch = (n_ctx + cs - 1) / cs;
    Scratch pm(n_ch * H), pl(n_ch * H), pc(n_ch * H * kvr);
    parallel_for(n_ch, grain_for_work(1, cs * H * (row + kvr)), [&](int64_t c0, int64_t c1) {
      Scratch buf(kDecodeSub * row), p(kDecodeSub);
      for (int64_t ch = c0; ch < c1; ++ch) {
        float* M = &pm[ch * H];
        float* L = &pl[ch * H];
        float* C = &pc[ch * H * kvr];
        std::fill(M, M + H, -std::numeric_limits<float>::infinity());
        std::fill(L, L + H, 0.0f);
        std::fill(C, C + H * kvr, 0.0f);
        const int64_t e = std::min(n_ctx, (ch + 1) * cs);
        for (int64_t s0 = ch * cs; s0 < e; s0 += kDecodeSub) {
          const int64_t nb = std::min(kDecodeSub, e - s0);
          const float* r = rows_f32(rows, s0, nb, kvr, d.dr, buf.data());
          for (int64_t h = 0; h < H; ++h) {
            const float* qc = &qcat[h * row];
            for (int64_t j = 0; j < nb; ++j) p[j] = vec::dot(qc, r + j * row, row);
            const float alpha = vec::softmax_online(p.data(), nb, nb, &M[h], &L[h]);
            float* ch_ctx = C + h * kvr;
            if (alpha != 1.0f) vec::scale(ch_ctx, alpha, ch_ctx, kvr);
            vec::gemm_nn(p.data(), nb, r, row, ch_ctx, kvr, 1, kvr, nb, true);  // ctx += Σ p·c
          }
        }
      }
    });
    // Merge the chunks in order, then o_h = W_vb,h ctx_h [dv].
    parallel_for(H, grain_for_work(1, n_ch * kvr + d.dv * kvr), [&](int64_t h0, int64_t h1) {
      for (int64_t h = h0; h < h1; ++h) {
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t ch = 0; ch < n_ch; ++ch) m = std::max(m, pm[ch * H + h]);
        float* cx = &ctx[h * kvr];
        std::fill(cx, cx + kvr, 0.0f);
        float l = 0.0f;
        for (int64_t ch = 0; ch < n_ch; ++ch) {
          const float f = std::exp(pm[ch * H + h] - m);
          l += f * pl[ch * H + h];
          vec::axpy(f, &pc[(ch * H + h) * kvr], cx, kvr);
        }
        vec::scale(cx, 1.0f / l, cx, kvr);
        matmul_bf16_raw(kv_b.v + h * kv_b.head_stride, d.dv, kvr, kvr, cx, 1, o + (t * H + h) * d.dv, kv_b.name);
      }
    });
  }
}

}  // namespace k3
