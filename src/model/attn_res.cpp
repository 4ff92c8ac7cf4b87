#include "model/attn_res.h"

#include <cmath>

#include "core/error.h"
#include "kernels/ref/norms.h"

namespace k3 {

void attn_res_mix(const std::vector<const float*>& sources, int64_t T, int64_t D, const float* score, float eps,
                  float* out, float* weights) {
  const int64_t n = static_cast<int64_t>(sources.size());
  if (n == 0) throw Error("AttnRes mix: no sources");
  std::vector<float> logit(n), p(n);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < n; ++j) {
      const float* v = sources[j] + t * D;
      const double inv = ref::rms_inv(v, D, eps);
      double acc = 0.0;
      for (int64_t i = 0; i < D; ++i) acc += static_cast<double>(score[i]) * v[i];
      logit[j] = static_cast<float>(acc * inv);
    }
    ref::softmax(logit.data(), n, p.data());
    for (int64_t i = 0; i < D; ++i) {
      double acc = 0.0;
      for (int64_t j = 0; j < n; ++j) acc += static_cast<double>(p[j]) * sources[j][t * D + i];
      out[t * D + i] = static_cast<float>(acc);
    }
    if (weights)
      for (int64_t j = 0; j < n; ++j) weights[t * n + j] = p[j];
  }
}

AttnResStream::AttnResStream(const float* x0, int64_t T, int64_t D, float eps)
    : T_(T), D_(D), eps_(eps), prefix_(x0, x0 + T * D) {}

void AttnResStream::mix(const AttnResWeights& w, float* out, float* weights, bool fast) const {
  if (static_cast<int64_t>(w.score.size()) != D_)
    throw Error("AttnRes mix: score vector has " + std::to_string(w.score.size()) + " entries, expected " +
                std::to_string(D_));
  std::vector<const float*> src;
  for (const auto& b : bank_) src.push_back(b.data());
  if (has_prefix_) src.push_back(prefix_.data());
  if (fast) attn_res_mix_fast(src, T_, D_, w.score.data(), eps_, out, weights);
  else attn_res_mix(src, T_, D_, w.score.data(), eps_, out, weights);
}

void AttnResStream::snapshot() {
  if (!has_prefix_) throw Error("AttnRes: snapshot with an empty partial sum");
  bank_.push_back(prefix_);
  has_prefix_ = false;
}

void AttnResStream::add(const float* a) {
  if (!has_prefix_) {
    prefix_.assign(a, a + T_ * D_);
    has_prefix_ = true;
    return;
  }
  for (int64_t i = 0; i < T_ * D_; ++i) prefix_[i] += a[i];
}

}  // namespace k3
