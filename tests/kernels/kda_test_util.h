// Shared helpers of the KDA kernel tests: input generators and an fp64 recurrence (the stronger
// oracle of algorithms.md §1.6), plus the max-rel metric (max|a-b| / max|b|, §1.6).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace k3::kda_test {

enum class Gates { Uniform, AllMin, NearMin, Mixed, Wide };  // see make_inputs
enum class Betas { Random, NearZero, NearOne };

/// Random KDA inputs in the kernels' layouts (kernels/kda_recurrent.h):
/// q, k, g [T,H,K]; v [T,H,V]; beta [T,H]; state [H,K,V] (non-zero unless zero_state).
struct Inputs {
  int T = 0, H = 0, K = 0, V = 0;
  std::vector<float> q, k, v, g, beta, state;
};

/// Gates: Uniform in [-5, 0]; AllMin = every gate exactly -5; NearMin = -5 + 1e-7 (rounds to the
/// float just above -5); Mixed = runs of 37 tokens alternating -5 and [-0.01, 0]; Wide = [-60, 0]
/// (Kimi-Linear-style unbounded gates). Betas: sigmoid(N(0,1)), in [1e-6, 1e-3], 1 - [1e-6, 1e-3].
inline Inputs make_inputs(int T, int H, int K, int V, Gates gates, Betas betas, uint32_t seed,
                          bool zero_state = false) {
  Inputs in;
  in.T = T;
  in.H = H;
  in.K = K;
  in.V = V;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nrm(0.f, 1.f);
  std::uniform_real_distribution<float> uni(0.f, 1.f);
  const std::size_t nk = static_cast<std::size_t>(T) * H * K, nv = static_cast<std::size_t>(T) * H * V;
  in.q.resize(nk);
  in.k.resize(nk);
  in.g.resize(nk);
  in.v.resize(nv);
  in.beta.resize(static_cast<std::size_t>(T) * H);
  for (auto* x : {&in.q, &in.k}) {
    for (auto& e : *x) e = nrm(rng);
    for (std::size_t r = 0; r < x->size(); r += static_cast<std::size_t>(K)) {
      float ss = 0.f;
      for (int d = 0; d < K; ++d) ss += (*x)[r + d] * (*x)[r + d];
      const float inv = 1.0f / std::sqrt(ss + 1e-6f);
      const float scale = (x == &in.q) ? inv / std::sqrt(static_cast<float>(K)) : inv;
      for (int d = 0; d < K; ++d) (*x)[r + d] *= scale;
    }
  }
  for (auto& e : in.v) e = nrm(rng);
  for (std::size_t i = 0; i < nk; ++i) {
    const std::size_t t = i / (static_cast<std::size_t>(H) * K);
    switch (gates) {
      case Gates::Uniform: in.g[i] = -5.0f * uni(rng); break;
      case Gates::AllMin: in.g[i] = -5.0f; break;
      case Gates::NearMin: in.g[i] = -5.0f + 1e-7f; break;
      case Gates::Mixed: in.g[i] = ((t / 37) % 2 == 0) ? -5.0f : -0.01f * uni(rng); break;
      case Gates::Wide: in.g[i] = -60.0f * uni(rng); break;
    }
  }
  for (auto& b : in.beta) {
    switch (betas) {
      case Betas::Random: b = 1.0f / (1.0f + std::exp(-nrm(rng))); break;
      case Betas::NearZero: b = 1e-6f + 1e-3f * uni(rng); break;
      case Betas::NearOne: b = 1.0f - (1e-6f + 1e-3f * uni(rng)); break;
    }
  }
  in.state.resize(static_cast<std::size_t>(H) * K * V);
  for (auto& s : in.state) s = zero_state ? 0.f : 0.3f * nrm(rng);
  return in;
}

/// fp64 recurrence, algorithms.md §1.2 order. state [H,K,V] in/out (double), out [T,H,V].
inline void recurrent_f64(const Inputs& in, std::vector<double>& state, std::vector<double>& out) {
  const int T = in.T, H = in.H, K = in.K, V = in.V;
  out.assign(static_cast<std::size_t>(T) * H * V, 0.0);
  std::vector<double> e(static_cast<std::size_t>(V));
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      const std::size_t ok = (static_cast<std::size_t>(t) * H + h) * K;
      const std::size_t ov = (static_cast<std::size_t>(t) * H + h) * V;
      double* S = &state[static_cast<std::size_t>(h) * K * V];
      for (int d = 0; d < K; ++d) {
        const double a = std::exp(static_cast<double>(in.g[ok + d]));
        for (int j = 0; j < V; ++j) S[d * V + j] *= a;
      }
      std::fill(e.begin(), e.end(), 0.0);
      for (int d = 0; d < K; ++d)
        for (int j = 0; j < V; ++j) e[j] += S[d * V + j] * in.k[ok + d];
      const double b = in.beta[static_cast<std::size_t>(t) * H + h];
      for (int j = 0; j < V; ++j) e[j] = b * (in.v[ov + j] - e[j]);
      for (int d = 0; d < K; ++d)
        for (int j = 0; j < V; ++j) S[d * V + j] += in.k[ok + d] * e[j];
      for (int d = 0; d < K; ++d)
        for (int j = 0; j < V; ++j) out[ov + j] += S[d * V + j] * in.q[ok + d];
    }
}

/// True when every element is finite.
template <class Vec>
bool all_finite(const Vec& a) {
  return std::all_of(a.begin(), a.end(), [](auto x) { return std::isfinite(x); });
}

/// max|a-b| / max|b| (algorithms.md §1.6). Returns +inf when sizes differ or anything is
/// non-finite, so a NaN can never hide inside "small error".
template <class A, class B>
double max_rel(const A& a, const B& b) {
  if (a.size() != b.size() || !all_finite(a) || !all_finite(b)) return INFINITY;
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return den > 0.0 ? num / den : num;
}

}  // namespace k3::kda_test
