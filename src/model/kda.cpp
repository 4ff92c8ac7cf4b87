#include "model/kda.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "kernels/kda_chunk.h"
#include "kernels/kda_decode.h"
#include "kernels/kda_prepare.h"
#include "kernels/op_profile.h"
#include "kernels/ops.h"
#include "kernels/ref/activations.h"
#include "kernels/ref/linear.h"
#include "kernels/ref/norms.h"
#include "kernels/threads.h"
#include "kernels/vec.h"
#include "model/buffer.h"

namespace k3 {

KdaDims KdaDims::from(const ModelConfig& c) {
  KdaDims d;
  d.D = c.hidden_size;
  d.H = c.kda_num_heads;
  d.d = c.kda_head_dim;
  d.K = c.short_conv_kernel_size;
  d.lower_bound = c.gate_lower_bound;
  d.rms_eps = c.rms_norm_eps;
  if (d.H <= 0 || d.d <= 0 || d.K < 1)
    throw Error(
        "config: linear_attn_config needs num_heads > 0, head_dim > 0, "
        "short_conv_kernel_size >= 1; found " +
        std::to_string(d.H) + ", " + std::to_string(d.d) + ", " + std::to_string(d.K));
  return d;
}

KdaState KdaState::zeros(const KdaDims& dims) {
  KdaState s;
  s.S.assign(static_cast<size_t>(dims.H * dims.d * dims.d), 0.f);
  s.conv.assign(static_cast<size_t>(3 * (dims.K - 1) * dims.C()), 0.f);
  return s;
}

float kda_decay_gate(float z, float dt_bias, float a_log, std::optional<float> lower_bound) {
  return kda_log_decay(z, dt_bias, a_log, lower_bound);
}

namespace {

/// Causal depthwise conv + SiLU for one token and one of q/k/v (spec §3.2 step 2).
/// raw: [C] this token's projection; taps: [C, K]; window: [K−1, C] (oldest first), advanced.
void short_conv_silu(const float* raw, const std::vector<float>& taps, float* window, int64_t C, int64_t K,
                     float* out) {
  for (int64_t c = 0; c < C; ++c) {
    const float* w = taps.data() + c * K;
    double acc = 0.0;
    for (int64_t j = 0; j + 1 < K; ++j) acc += static_cast<double>(w[j]) * window[j * C + c];
    acc += static_cast<double>(w[K - 1]) * raw[c];
    out[c] = ref::silu(static_cast<float>(acc));
  }
  // Shift the window by one token: slot j <- slot j+1, newest slot <- raw.
  for (int64_t j = 0; j + 2 < K; ++j)
    for (int64_t c = 0; c < C; ++c) window[j * C + c] = window[(j + 1) * C + c];
  if (K > 1)
    for (int64_t c = 0; c < C; ++c) window[(K - 2) * C + c] = raw[c];
}

/// Delta-rule step for one head in the exact order of algorithms.md §1.2.
/// S: [d, d] key-major; q (normalized, scaled), k (normalized), v: [d]; alpha: [d] = exp(g).
void delta_rule_step(float* S, const float* q, const float* k, const float* v, const float* alpha, float beta,
                     int64_t d, float* o, std::vector<float>& u) {
  // 1. Decay: row i scaled by α[i].
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < d; ++j) S[i * d + j] *= alpha[i];
  // 2. Prediction error against the decayed state: u = v − Sᵀ k.
  for (int64_t j = 0; j < d; ++j) {
    double acc = 0.0;
    for (int64_t i = 0; i < d; ++i) acc += static_cast<double>(S[i * d + j]) * k[i];
    u[j] = v[j] - static_cast<float>(acc);
  }
  // 3. Delta write: S += β k uᵀ.
  for (int64_t i = 0; i < d; ++i) {
    const float bk = beta * k[i];
    for (int64_t j = 0; j < d; ++j) S[i * d + j] += bk * u[j];
  }
  // 4. Read with the updated state: o = Sᵀ q.
  for (int64_t j = 0; j < d; ++j) {
    double acc = 0.0;
    for (int64_t i = 0; i < d; ++i) acc += static_cast<double>(S[i * d + j]) * q[i];
    o[j] = static_cast<float>(acc);
  }
}

/// Fast path of kda_forward_batch (states already validated): the same per-token preprocessing
/// and output gating as named ops (kernels/kda_prepare.h), the chunkwise / decode KDA kernels
/// per sequence. Projections and o_proj run once over all
/// rows of the batch. Oracle: the token-by-token path below (fast_path_test).
void kda_forward_fast(const KdaWeights& w, const KdaDims& dm, const float* x, std::span<const SeqRows> segs,
                      std::span<KdaState* const> states, float* out) {
  const int64_t H = dm.H, d = dm.d, C = dm.C(), K = dm.K, W = K - 1;
  const int64_t T = total_rows(segs), S = static_cast<int64_t>(segs.size());
  // Projections of every row: p[i] = q/k/v [T, C].
  const TensorView* proj[3] = {w.q_proj, w.k_proj, w.v_proj};
  const std::vector<float>* taps[3] = {&w.q_conv, &w.k_conv, &w.v_conv};
  FBuf p(static_cast<size_t>(3 * T * C)), tt(static_cast<size_t>(3 * K * C));
  FBuf fa(T * d), z(T * C), bl(T * H), gl(T * C);
  {  // the six projections of x: one parallel region for decode (ops.h matmul_same_input)
    const TensorView* xs[6] = {proj[0], proj[1], proj[2], w.f_a, w.b_proj, w.g_proj};
    float* ys[6] = {&p[0], &p[T * C], &p[2 * T * C], fa.data(), bl.data(), gl.data()};
    k3::matmul_same_input(xs, x, T, ys);
  }
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t j = 0; j < K; ++j) tt[(i * K + j) * C + c] = (*taps[i])[c * K + j];  // [K, C]
  k3::matmul(*w.f_b, fa.data(), T, z.data());

  // ext: per sequence s and i = q, k, v, its conv window ++ its new projections,
  // [W + T_s, C] at ext_off[s] + i·(W + T_s)·C.
  std::vector<int64_t> ext_off(static_cast<size_t>(S));
  int64_t ext_n = 0;
  for (int64_t s = 0; s < S; ++s) {
    ext_off[s] = ext_n;
    ext_n += 3 * (W + segs[s].T) * C;
  }
  FBuf ext(static_cast<size_t>(ext_n));
  for (int64_t s = 0; s < S; ++s)
    for (int64_t i = 0; i < 3; ++i) {
      float* e = &ext[ext_off[s] + i * (W + segs[s].T) * C];
      std::copy_n(states[s]->conv.data() + i * W * C, W * C, e);
      std::copy_n(&p[(i * T + segs[s].row0) * C], segs[s].T * C, e + W * C);
    }

  // q, k, v, g: [T, H, d]; beta: [T, H] (kernels/kda_recurrent.h conventions): conv + SiLU,
  // L2 norms, log-decay gate and β of every row (kernels/kda_prepare.h).
  FBuf q(T * C), k(T * C), v(T * C), g(T * C), beta(T * H), o(T * C);
  const KdaPrepShape shape{H, d, K, dm.lower_bound, kKdaL2NormEps};
  std::vector<KdaPiece> pieces(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) pieces[s] = KdaPiece{segs[s].row0, segs[s].T, &ext[ext_off[s]]};
  kda_prepare(shape, pieces, tt.data(), z.data(), w.dt_bias.data(), w.a_log.data(), bl.data(), q.data(), k.data(),
              v.data(), g.data(), beta.data());
  // Per sequence: the conv window advances by T_s tokens (the last K−1 rows of each ext), and
  // the recurrence runs on its state. With at least as many sequences as threads, sequences run
  // in parallel (each kernel then inline); otherwise one at a time with heads in parallel. The
  // kernels' results do not depend on the thread count, so both give the same bits.
  const int Hi = static_cast<int>(H), di = static_cast<int>(d);
  auto run_seq = [&](int64_t s) {
    const int64_t Ts = segs[s].T, r0 = segs[s].row0;
    KdaState& st = *states[s];
    for (int64_t i = 0; i < 3; ++i)
      std::copy_n(&ext[ext_off[s] + (i * (W + Ts) + Ts) * C], W * C, st.conv.data() + i * W * C);
    if (Ts == 1 || segs[s].per_token) {
      // Decode form: one decode step per token (bit-identical to Ts one-token calls).
      StateLog* log = segs[s].kda_steps;
      for (int64_t t = 0; t < Ts; ++t) {
        const size_t a = static_cast<size_t>((r0 + t) * C);
        kda_decode_step(Hi, di, di, &q[a], &k[a], &v[a], &g[a], &beta[(r0 + t) * H], st.S.data(), &o[a]);
        if (!log) continue;
        log->append(st.S);
        for (int64_t i = 0; i < 3; ++i) {  // the window after token t: ext rows [t + 1, t + 1 + W)
          const float* e = &ext[ext_off[s] + (i * (W + Ts) + t + 1) * C];
          log->append(std::span<const float>(e, static_cast<size_t>(W * C)));
        }
      }
      return;
    }
    const size_t a = static_cast<size_t>(r0 * C);
    kda_chunk(static_cast<int>(Ts), Hi, di, di, &q[a], &k[a], &v[a], &g[a], &beta[r0 * H], st.S.data(), &o[a], 64);
  };
  {
    const prof::Scope timer("kda.recurrence", 0);  // k3 bench --profile (the state is not a weight)
    if (S >= num_threads() && S > 1)
      parallel_for(S, 1, [&](int64_t s0, int64_t s1) {
        for (int64_t s = s0; s < s1; ++s) run_seq(s);
      });
    else
      for (int64_t s = 0; s < S; ++s) run_seq(s);
  }
  // Output: per-head RMSNorm (shared weight) times σ(full-rank gate), then o_proj.
  kda_output_gate(shape, T, w.o_norm.data(), dm.rms_eps, gl.data(), o.data());
  if (w.o_proj) k3::matmul(*w.o_proj, o.data(), T, out);
  else std::copy_n(o.data(), T * C, out);
}

}  // namespace

void kda_forward(const KdaWeights& w, const KdaDims& dm, const float* x, int64_t T, KdaState& st, float* out,
                 const ExecOptions& ex) {
  const SeqRows seg{0, T};
  KdaState* sp = &st;
  kda_forward_batch(w, dm, x, std::span<const SeqRows>(&seg, 1), std::span<KdaState* const>(&sp, 1), out, ex);
}

void kda_forward_batch(const KdaWeights& w, const KdaDims& dm, const float* x, std::span<const SeqRows> segs,
                       std::span<KdaState* const> states, float* out, const ExecOptions& ex) {
  const int64_t H = dm.H, d = dm.d, C = dm.C(), K = dm.K;
  if (segs.size() != states.size() || segs.empty())
    throw Error("KDA batch: expected one state per sequence, found " + std::to_string(states.size()) + " states for " +
                std::to_string(segs.size()) + " sequences");
  for (size_t s = 0; s < segs.size(); ++s) {
    const KdaState& st = *states[s];
    if (segs[s].T < 1 || segs[s].row0 != (s == 0 ? 0 : segs[s - 1].row0 + segs[s - 1].T))
      throw Error("KDA batch: sequence " + std::to_string(s) + " rows do not follow the previous one");
    if (st.S.size() != static_cast<size_t>(H * d * d) || st.conv.size() != static_cast<size_t>(3 * (K - 1) * C))
      throw Error("KDA state: expected S [" + std::to_string(H) + ", " + std::to_string(d) + ", " + std::to_string(d) +
                  "] and conv [3, " + std::to_string(K - 1) + ", " + std::to_string(C) + "], found " +
                  std::to_string(st.S.size()) + " and " + std::to_string(st.conv.size()) + " floats");
  }
  if (ex.fast) return kda_forward_fast(w, dm, x, segs, states, out);
  const int64_t T = total_rows(segs);
  // Token-parallel projections over the [T, D] block (layer-major).
  std::vector<float> qp(T * C), kp(T * C), vp(T * C), fa(T * d), z(T * C), bl(T * H), gl(T * C);
  ref::matmul(*w.q_proj, x, T, qp.data());
  ref::matmul(*w.k_proj, x, T, kp.data());
  ref::matmul(*w.v_proj, x, T, vp.data());
  ref::matmul(*w.f_a, x, T, fa.data());
  ref::matmul(*w.f_b, fa.data(), T, z.data());
  ref::matmul(*w.b_proj, x, T, bl.data());
  ref::matmul(*w.g_proj, x, T, gl.data());

  const float q_scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> q(C), k(C), v(C), alpha(C), o(C), u(d);
  std::vector<float> y(T * C);
  for (size_t s = 0; s < segs.size(); ++s) {
    KdaState& st = *states[s];
    float* win_q = st.conv.data();
    float* win_k = win_q + (K - 1) * C;
    float* win_v = win_k + (K - 1) * C;
    for (int64_t t = segs[s].row0; t < segs[s].row0 + segs[s].T; ++t) {
      short_conv_silu(&qp[t * C], w.q_conv, win_q, C, K, q.data());
      short_conv_silu(&kp[t * C], w.k_conv, win_k, C, K, k.data());
      short_conv_silu(&vp[t * C], w.v_conv, win_v, C, K, v.data());
      for (int64_t h = 0; h < H; ++h) {
        float* qh = q.data() + h * d;
        float* kh = k.data() + h * d;
        ref::l2norm(qh, d, kKdaL2NormEps, qh);
        ref::l2norm(kh, d, kKdaL2NormEps, kh);
        for (int64_t i = 0; i < d; ++i) qh[i] *= q_scale;
        for (int64_t i = 0; i < d; ++i) {
          const int64_t c = h * d + i;
          alpha[c] = std::exp(kda_decay_gate(z[t * C + c], w.dt_bias[c], w.a_log[h], dm.lower_bound));
        }
        const float beta = ref::sigmoid(bl[t * H + h]);
        delta_rule_step(st.S.data() + h * d * d, qh, kh, v.data() + h * d, alpha.data() + h * d, beta, d,
                        o.data() + h * d, u);
        // Output: per-head RMSNorm (shared weight) times σ(full-rank gate).
        float* yh = y.data() + t * C + h * d;
        ref::rmsnorm(o.data() + h * d, d, w.o_norm.data(), dm.rms_eps, yh);
        for (int64_t i = 0; i < d; ++i) yh[i] *= ref::sigmoid(gl[t * C + h * d + i]);
      }
      if (StateLog* log = segs[s].kda_steps) {  // the state after token t
        log->append(st.S);
        log->append(st.conv);
      }
    }
  }
  if (w.o_proj) ref::matmul(*w.o_proj, y.data(), T, out);
  else std::copy_n(y.data(), T * C, out);
}

}  // namespace k3
