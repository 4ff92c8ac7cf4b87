// One KDA layer against an independent fp64 evaluation that uses the MATRIX form of the update,
// S_t = (I − β k kᵀ) Diag(α) S_{t−1} + β k vᵀ, o_t = S_tᵀ q (algorithms.md §1.2), instead of the
// engine's four-step order. Also checks the conv taps orientation (tap 0 = oldest, spec §2.3).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/kda.h"
#include "test_util.h"

namespace {

using Mat = std::vector<double>;

TEST(KdaOracle, MatchesFp64MatrixFormOverSeveralTokens) {
  std::mt19937 rng(21);
  const int64_t D = 20, H = 2, d = 8, C = H * d, K = 3, T = 7;
  k3test::OwnedBf16 q("q", C, D, rng, 2.f), k("k", C, D, rng, 2.f), v("v", C, D, rng), fa("fa", d, D, rng),
      fb("fb", C, d, rng), b("b", H, D, rng), g("g", C, D, rng), o("o", D, C, rng);
  k3::KdaWeights w;
  w.q_proj = &q.view;
  w.k_proj = &k.view;
  w.v_proj = &v.view;
  w.f_a = &fa.view;
  w.f_b = &fb.view;
  w.b_proj = &b.view;
  w.g_proj = &g.view;
  w.o_proj = &o.view;
  w.q_conv = k3test::randn(C * K, rng, 0.7f);
  w.k_conv = k3test::randn(C * K, rng, 0.7f);
  w.v_conv = k3test::randn(C * K, rng, 0.7f);
  w.dt_bias = k3test::randn(C, rng);
  w.a_log = k3test::randn(H, rng, 0.5f);
  w.o_norm = k3test::randn(d, rng, 0.2f);
  for (auto& x : w.o_norm) x += 1.f;
  k3::KdaDims dm;
  dm.D = D;
  dm.H = H;
  dm.d = d;
  dm.K = K;
  dm.lower_bound = -5.f;
  dm.rms_eps = 1e-5f;
  std::vector<float> x = k3test::randn(T * D, rng), out(T * D);
  k3::KdaState st = k3::KdaState::zeros(dm);
  k3::kda_forward(w, dm, x.data(), T, st, out.data());

  auto lin = [&](const k3test::OwnedBf16& W, const std::vector<double>& in) {
    std::vector<double> r(W.view.shape[0], 0.0);
    for (int64_t i = 0; i < W.view.shape[0]; ++i)
      for (int64_t j = 0; j < W.view.shape[1]; ++j) r[i] += W.at(i, j) * in[j];
    return r;
  };
  auto sig = [](double z) { return 1.0 / (1.0 + std::exp(-z)); };
  std::vector<std::vector<double>> hist_q, hist_k, hist_v;  // raw projections of all tokens so far
  std::vector<Mat> S(H, Mat(d * d, 0.0));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> xt(x.begin() + t * D, x.begin() + (t + 1) * D);
    hist_q.push_back(lin(q, xt));
    hist_k.push_back(lin(k, xt));
    hist_v.push_back(lin(v, xt));
    auto conv = [&](const std::vector<std::vector<double>>& hist, const std::vector<float>& taps) {
      std::vector<double> r(C, 0.0);
      for (int64_t c = 0; c < C; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < K; ++j) {  // tap j multiplies token t − (K−1) + j; zero before start
          const int64_t s = t - (K - 1) + j;
          if (s >= 0) acc += taps[c * K + j] * hist[s][c];
        }
        r[c] = acc * sig(acc);
      }
      return r;
    };
    std::vector<double> qc = conv(hist_q, w.q_conv), kc = conv(hist_k, w.k_conv), vc = conv(hist_v, w.v_conv);
    std::vector<double> z = lin(fb, lin(fa, xt)), bl = lin(b, xt), gl = lin(g, xt), y(C);
    for (int64_t h = 0; h < H; ++h) {
      double nq = 0, nk = 0;
      for (int64_t i = 0; i < d; ++i) nq += qc[h * d + i] * qc[h * d + i], nk += kc[h * d + i] * kc[h * d + i];
      std::vector<double> qh(d), kh(d), alpha(d);
      for (int64_t i = 0; i < d; ++i) {
        qh[i] = qc[h * d + i] / std::sqrt(nq + 1e-6) / std::sqrt(static_cast<double>(d));
        kh[i] = kc[h * d + i] / std::sqrt(nk + 1e-6);
        alpha[i] =
            std::exp(-5.0 * sig(std::exp(static_cast<double>(w.a_log[h])) * (z[h * d + i] + w.dt_bias[h * d + i])));
      }
      const double beta = sig(bl[h]);
      // A = (I − β k kᵀ) Diag(α); S ← A S + β k vᵀ.
      Mat A(d * d), Sn(d * d, 0.0);
      for (int64_t i = 0; i < d; ++i)
        for (int64_t j = 0; j < d; ++j) A[i * d + j] = ((i == j ? 1.0 : 0.0) - beta * kh[i] * kh[j]) * alpha[j];
      for (int64_t i = 0; i < d; ++i)
        for (int64_t j = 0; j < d; ++j) {
          double acc = beta * kh[i] * vc[h * d + j];
          for (int64_t l = 0; l < d; ++l) acc += A[i * d + l] * S[h][l * d + j];
          Sn[i * d + j] = acc;
        }
      S[h] = Sn;
      std::vector<double> oh(d, 0.0);
      double ms = 0;
      for (int64_t j = 0; j < d; ++j) {
        for (int64_t i = 0; i < d; ++i) oh[j] += S[h][i * d + j] * qh[i];
        ms += oh[j] * oh[j];
      }
      for (int64_t j = 0; j < d; ++j)
        y[h * d + j] = oh[j] / std::sqrt(ms / d + 1e-5) * w.o_norm[j] * sig(gl[h * d + j]);
    }
    std::vector<double> ref = lin(o, y);
    std::vector<float> reff(ref.begin(), ref.end());
    EXPECT_LE(k3test::rel_l2(out.data() + t * D, reff.data(), D), 1e-5) << "token " << t;
  }
  // Final recurrent state equals the oracle's (key-major [H, d_k, d_v]).
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < d * d; ++i) EXPECT_NEAR(st.S[h * d * d + i], S[h][i], 1e-5 * (1 + std::fabs(S[h][i])));
  // Conv window = raw projections of the last K−1 tokens, oldest first.
  for (int64_t j = 0; j < K - 1; ++j)
    for (int64_t c = 0; c < C; ++c)
      EXPECT_NEAR(st.conv[j * C + c], hist_q[T - (K - 1) + j][c], 1e-5 * (1 + std::fabs(hist_q[T - (K - 1) + j][c])));
}

}  // namespace
