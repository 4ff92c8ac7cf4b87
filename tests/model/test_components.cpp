// Component tests with in-memory weights: KDA gate values, KDA state continuation, AttnRes mix,
// MLA absorbed (decode) form == expanded form, MLA cache growth.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "model/attn_res.h"
#include "model/kda.h"
#include "model/mla.h"
#include "test_util.h"

namespace {

TEST(KdaGate, K3LowerBoundedGateUnitValue) {
  // A_log = 0, dt_bias = 0, z = 0, lower bound −5: g = −5·σ(0) = −2.5, α = e^−2.5.
  const float g = k3::kda_decay_gate(0.f, 0.f, 0.f, -5.f);
  EXPECT_FLOAT_EQ(g, -2.5f);
  EXPECT_NEAR(std::exp(g), 0.082085, 1e-6);
  // Saturation to (lower bound, 0); exp(A_log) multiplies inside the sigmoid.
  EXPECT_NEAR(k3::kda_decay_gate(100.f, 0.f, 0.f, -5.f), -5.f, 1e-6);
  EXPECT_NEAR(k3::kda_decay_gate(-100.f, 0.f, 0.f, -5.f), 0.f, 1e-6);
  EXPECT_NEAR(k3::kda_decay_gate(0.5f, 0.25f, std::log(2.f), -5.f), -5.0 / (1.0 + std::exp(-1.5)), 1e-6);
}

TEST(KdaGate, KimiLinearGateIsADifferentFunction) {
  // −exp(A_log)·softplus(z + dt_bias): at 0 → −log 2.
  EXPECT_NEAR(k3::kda_decay_gate(0.f, 0.f, 0.f, std::nullopt), -std::log(2.0), 1e-7);
  EXPECT_NEAR(k3::kda_decay_gate(1.f, 1.f, std::log(3.f), std::nullopt), -3.0 * std::log1p(std::exp(2.0)), 1e-5);
  EXPECT_LT(k3::kda_decay_gate(50.f, 0.f, 0.f, std::nullopt), -49.f);  // unbounded below
}

struct KdaFixture {
  std::mt19937 rng{11};
  k3::KdaDims d;
  k3test::OwnedBf16 q{"q", 32, 24, rng}, k{"k", 32, 24, rng}, v{"v", 32, 24, rng}, fa{"fa", 8, 24, rng},
      fb{"fb", 32, 8, rng}, b{"b", 4, 24, rng}, g{"g", 32, 24, rng}, o{"o", 24, 32, rng};
  k3::KdaWeights w;
  KdaFixture() {
    d.D = 24;
    d.H = 4;
    d.d = 8;
    d.K = 4;
    d.lower_bound = -5.f;
    d.rms_eps = 1e-5f;
    w.q_proj = &q.view;
    w.k_proj = &k.view;
    w.v_proj = &v.view;
    w.f_a = &fa.view;
    w.f_b = &fb.view;
    w.b_proj = &b.view;
    w.g_proj = &g.view;
    w.o_proj = &o.view;
    w.q_conv = k3test::randn(32 * 4, rng, 0.5f);
    w.k_conv = k3test::randn(32 * 4, rng, 0.5f);
    w.v_conv = k3test::randn(32 * 4, rng, 0.5f);
    w.dt_bias = k3test::randn(32, rng);
    w.a_log = k3test::randn(4, rng, 0.5f);
    w.o_norm = k3test::randn(8, rng, 0.1f);
    for (auto& x : w.o_norm) x += 1.f;
  }
};

TEST(Kda, BlockOfTokensEqualsTokenByTokenAndStateCarries) {
  KdaFixture f;
  const int T = 9;
  std::vector<float> x = k3test::randn(T * 24, f.rng), out_all(T * 24), out_step(T * 24);
  k3::KdaState s1 = k3::KdaState::zeros(f.d), s2 = k3::KdaState::zeros(f.d);
  k3::kda_forward(f.w, f.d, x.data(), T, s1, out_all.data());
  for (int t = 0; t < T; ++t) k3::kda_forward(f.w, f.d, x.data() + t * 24, 1, s2, out_step.data() + t * 24);
  EXPECT_EQ(out_all, out_step);  // same per-token arithmetic: bitwise equal
  EXPECT_EQ(s1.S, s2.S);
  EXPECT_EQ(s1.conv, s2.conv);
  // Conv window holds the last K−1 raw projections; the state is not trivially zero.
  double n = 0;
  for (float v : s1.S) n += std::fabs(v);
  EXPECT_GT(n, 0.0);
  EXPECT_EQ(s1.bytes(), (4u * 8 * 8 + 3u * 3 * 32) * 4);
}

TEST(Kda, CausalOutputsDoNotDependOnLaterTokens) {
  KdaFixture f;
  const int T = 6;
  std::vector<float> x = k3test::randn(T * 24, f.rng), y1(T * 24), y2(T * 24);
  k3::KdaState s1 = k3::KdaState::zeros(f.d), s2 = k3::KdaState::zeros(f.d);
  k3::kda_forward(f.w, f.d, x.data(), T, s1, y1.data());
  for (int i = 4 * 24; i < T * 24; ++i) x[i] += 1.f;
  k3::kda_forward(f.w, f.d, x.data(), T, s2, y2.data());
  for (int i = 0; i < 4 * 24; ++i) EXPECT_EQ(y1[i], y2[i]);
  EXPECT_NE(y1[5 * 24], y2[5 * 24]);
}

TEST(Kda, RejectsMismatchedState) {
  KdaFixture f;
  std::vector<float> x(24), y(24);
  k3::KdaState s;
  EXPECT_THROW(k3::kda_forward(f.w, f.d, x.data(), 1, s, y.data()), k3::Error);
}

TEST(AttnRes, MixMatchesFormula) {
  std::mt19937 rng(3);
  const int T = 2, D = 16;
  std::vector<float> a = k3test::randn(T * D, rng), b = k3test::randn(T * D, rng, 3.f);
  std::vector<float> s = k3test::randn(D, rng, 0.3f), out(T * D), w(T * 2);
  k3::attn_res_mix({a.data(), b.data()}, T, D, s.data(), 1e-5f, out.data(), w.data());
  for (int t = 0; t < T; ++t) {
    double sc[2];
    const float* src[2] = {a.data() + t * D, b.data() + t * D};
    for (int j = 0; j < 2; ++j) {
      double ms = 0, dot = 0;
      for (int i = 0; i < D; ++i)
        ms += src[j][i] * static_cast<double>(src[j][i]), dot += s[i] * static_cast<double>(src[j][i]);
      sc[j] = dot / std::sqrt(ms / D + 1e-5);
    }
    const double p0 = 1.0 / (1.0 + std::exp(sc[1] - sc[0]));
    EXPECT_NEAR(w[t * 2], p0, 1e-6);
    EXPECT_NEAR(w[t * 2 + 1], 1 - p0, 1e-6);
    for (int i = 0; i < D; ++i) EXPECT_NEAR(out[t * D + i], p0 * src[0][i] + (1 - p0) * src[1][i], 1e-5);
  }
  // One source: identity with weight 1.
  k3::attn_res_mix({a.data()}, T, D, s.data(), 1e-5f, out.data(), w.data());
  EXPECT_EQ(w[0], 1.f);
  for (int i = 0; i < T * D; ++i) EXPECT_FLOAT_EQ(out[i], a[i]);
}

// The fast twin (fp32 vector kernels, tokens across threads) against the fp64 oracle, with
// sources of very different scales (near-one-hot mixes) and D not a multiple of the vector width.
TEST(AttnRes, FastMixMatchesOracle) {
  std::mt19937 rng(5);
  for (const int D : {1, 7, 16, 33, 128, 1000}) {
    const int T = 37, n = 5;
    std::vector<std::vector<float>> v;
    std::vector<const float*> src;
    for (int j = 0; j < n; ++j) v.push_back(k3test::randn(T * D, rng, 0.1f + 2.f * j));
    for (auto& b : v) src.push_back(b.data());
    std::vector<float> s = k3test::randn(D, rng, 1.f), o_ref(T * D), o_fast(T * D), w_ref(T * n), w_fast(T * n);
    k3::attn_res_mix(src, T, D, s.data(), 1e-5f, o_ref.data(), w_ref.data());
    k3::attn_res_mix_fast(src, T, D, s.data(), 1e-5f, o_fast.data(), w_fast.data());
    // The mixing logits are fp32 dot products of D terms of size ~1 (logits ~sqrt(D)), whose
    // rounding grows like sqrt(D)·u·|logit|: bound the weights by 1e-6·sqrt(D) and the outputs
    // by that times the largest source magnitude (8.1 here) — ~10x the observed error.
    const double tol_w = 1e-6 * std::sqrt(static_cast<double>(D));
    double vmax = 0;
    for (auto& b : v)
      for (float x : b) vmax = std::max(vmax, static_cast<double>(std::fabs(x)));
    for (int i = 0; i < T * n; ++i) EXPECT_NEAR(w_fast[i], w_ref[i], tol_w) << "D=" << D << " i=" << i;
    for (int i = 0; i < T * D; ++i)
      EXPECT_NEAR(o_fast[i], o_ref[i], tol_w * vmax + 1e-6 * std::fabs(o_ref[i])) << "D=" << D << " i=" << i;
  }
}

TEST(AttnRes, StreamBookkeeping) {
  const int T = 1, D = 4;
  std::vector<float> x0 = {1, 2, 3, 4}, a = {1, 1, 1, 1};
  k3::AttnResStream st(x0.data(), T, D, 1e-5f);
  EXPECT_TRUE(st.bank_empty());
  st.snapshot();  // bank = [x0], prefix = NONE
  EXPECT_EQ(st.n_sources(), 1);
  st.add(a.data());  // prefix = a
  EXPECT_EQ(st.n_sources(), 2);
  EXPECT_EQ(st.prefix(), a);
  st.add(a.data());  // prefix = 2a
  EXPECT_EQ(st.prefix(), (std::vector<float>{2, 2, 2, 2}));
  k3::AttnResWeights zero{std::vector<float>(D, 0.f)};  // zero scores → uniform mix
  std::vector<float> out(D), w(2);
  st.mix(zero, out.data(), w.data());
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(out[0], 1.5f);
  EXPECT_FLOAT_EQ(out[3], 3.0f);
}

struct MlaFixture {
  std::mt19937 rng{5};
  k3::MlaDims d;
  // D 24, H 3, q_rank 16, kv_rank 12, dn 8, dr 4, dv 6
  k3test::OwnedBf16 qa{"q_a", 16, 24, rng}, qb{"q_b", 3 * 12, 16, rng, 2.f}, kva{"kv_a", 16, 24, rng, 2.f},
      kvb{"kv_b", 3 * 14, 12, rng, 2.f}, g{"g", 18, 24, rng}, o{"o", 24, 18, rng};
  k3::MlaWeights w;
  MlaFixture() {
    d.D = 24;
    d.H = 3;
    d.q_rank = 16;
    d.kv_rank = 12;
    d.dn = 8;
    d.dr = 4;
    d.dv = 6;
    d.norm_eps = 1e-6f;
    w.q_a = &qa.view;
    w.q_b = &qb.view;
    w.kv_a = &kva.view;
    w.kv_b = &kvb.view;
    w.g_proj = &g.view;
    w.o_proj = &o.view;
    w.q_a_norm = k3test::randn(16, rng, 0.1f);
    w.kv_a_norm = k3test::randn(12, rng, 0.1f);
    for (auto& x : w.q_a_norm) x += 1.f;
    for (auto& x : w.kv_a_norm) x += 1.f;
  }
};

TEST(Mla, AbsorbedDecodeEqualsExpandedForm) {
  MlaFixture f;
  const int T = 7;
  std::vector<float> x = k3test::randn(T * 24, f.rng), ye(T * 24), ya(T * 24);
  k3::MlaCache ce, ca;
  k3::mla_forward(f.w, f.d, x.data(), T, ce, ye.data(), k3::MlaMode::Expanded);
  k3::mla_forward(f.w, f.d, x.data(), T, ca, ya.data(), k3::MlaMode::Absorbed);
  EXPECT_EQ(ce.rows, ca.rows);  // the cache holds [normalized latent, raw k_r] either way
  EXPECT_EQ(ce.n_tokens(f.d), T);
  for (int t = 0; t < T; ++t)
    EXPECT_LE(k3test::rel_l2(ya.data() + t * 24, ye.data() + t * 24, 24), 1e-6) << "token " << t;
}

// The fast path's Expanded (query blocks of 32, two fp32 GEMMs per head) and Absorbed (latent
// scores) forms vs the fp64 oracle, over a prefill of 37 tokens then 30 more on a non-empty
// cache (query blocks that straddle the causal boundary and a cache offset n_past > 0).
TEST(Mla, FastPathFormsMatchOracle) {
  MlaFixture f;
  const int T1 = 37, T2 = 30;
  std::vector<float> x = k3test::randn((T1 + T2) * 24, f.rng);
  k3::ExecOptions fast;
  fast.fast = true;
  std::vector<float> yr((T1 + T2) * 24);
  k3::MlaCache cr;
  k3::mla_forward(f.w, f.d, x.data(), T1, cr, yr.data(), k3::MlaMode::Expanded);
  k3::mla_forward(f.w, f.d, x.data() + T1 * 24, T2, cr, yr.data() + T1 * 24, k3::MlaMode::Expanded);
  for (k3::MlaMode mode : {k3::MlaMode::Expanded, k3::MlaMode::Absorbed, k3::MlaMode::Auto}) {
    std::vector<float> y((T1 + T2) * 24);
    k3::MlaCache c;
    k3::mla_forward(f.w, f.d, x.data(), T1, c, y.data(), mode, fast);
    k3::mla_forward(f.w, f.d, x.data() + T1 * 24, T2, c, y.data() + T1 * 24, mode, fast);
    EXPECT_EQ(c.n_tokens(f.d), T1 + T2);
    // fp32 (fast) vs fp64 (oracle): ~1e-7 per operation through a few dozen operations.
    for (int t = 0; t < T1 + T2; ++t)
      EXPECT_LE(k3test::rel_l2(y.data() + t * 24, yr.data() + t * 24, 24), 2e-6)
          << "mode " << static_cast<int>(mode) << " token " << t;
  }
}

TEST(Mla, PrefillThenDecodeEqualsOnePass) {
  MlaFixture f;
  const int T = 6, P = 4;
  std::vector<float> x = k3test::randn(T * 24, f.rng), y1(T * 24), y2(T * 24);
  k3::MlaCache c1, c2;
  k3::mla_forward(f.w, f.d, x.data(), T, c1, y1.data());
  k3::mla_forward(f.w, f.d, x.data(), P, c2, y2.data());  // prefill (expanded)
  for (int t = P; t < T; ++t)
    k3::mla_forward(f.w, f.d, x.data() + t * 24, 1, c2, y2.data() + t * 24);  // decode (absorbed)
  for (int t = 0; t < T; ++t) EXPECT_LE(k3test::rel_l2(y2.data() + t * 24, y1.data() + t * 24, 24), 1e-6);
  // The cache row is [RMSNorm(c) (kv_rank), raw k_r (dr)] — check k_r is the raw projection.
  std::vector<float> ckv(16);
  std::vector<float> xn(x.begin(), x.begin() + 24);
  for (int r = 0; r < 16; ++r) {
    double acc = 0;
    for (int c = 0; c < 24; ++c) acc += static_cast<double>(f.kva.at(r, c)) * xn[c];
    ckv[r] = static_cast<float>(acc);
  }
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(c1.rows[12 + j], ckv[12 + j], 1e-5);
}

}  // namespace
