#include "model/dense_mlp.h"

#include <algorithm>

#include <vector>

#include "core/error.h"
#include "kernels/ref/activations.h"
#include "kernels/ref/linear.h"

namespace k3 {

float GluActivation::operator()(float g, float u) const {
  return situ ? ref::situ(g, u, beta, linear_beta) : ref::swiglu(g, u);
}

GluActivation GluActivation::from(const ModelConfig& c) {
  GluActivation a;
  if (c.hidden_act == "situ") {
    a.situ = true;
    a.beta = c.situ_beta;
    a.linear_beta = c.situ_linear_beta;
    if (!(a.beta > 0.f) || (a.linear_beta && !(*a.linear_beta > 0.f)))
      throw Error("config: activation_situ_beta / activation_situ_linear_beta must be > 0");
  } else if (c.hidden_act == "silu") {
    a.situ = false;
  } else {
    throw Error("config: hidden_act '" + c.hidden_act + "' is not supported; expected \"situ\" or \"silu\"");
  }
  return a;
}

GluAct to_glu_act(const GluActivation& a) {
  GluAct g;
  g.situ = a.situ;
  g.beta = a.beta;
  g.linear_beta = a.linear_beta ? *a.linear_beta : 0.f;
  return g;
}

void glu_mlp_forward(const GluMlpWeights& w, const GluActivation& act, const float* x, int64_t T, float* out,
                     const ExecOptions& ex) {
  const int64_t I = w.gate->shape[0];
  std::vector<float> g(T * I), u(T * I);
  if (ex.fast) {
    const TensorView* xs[2] = {w.gate, w.up};  // one parallel region for decode
    float* ys[2] = {g.data(), u.data()};
    k3::matmul_same_input(xs, x, T, ys);
    glu_activation(g.data(), u.data(), g.data(), T * I, to_glu_act(act));
    if (w.down) k3::matmul(*w.down, g.data(), T, out);
    else std::copy_n(g.data(), T * I, out);
    return;
  }
  ref::matmul(*w.gate, x, T, g.data());
  ref::matmul(*w.up, x, T, u.data());
  for (int64_t i = 0; i < T * I; ++i) g[i] = act(g[i], u[i]);
  if (w.down) ref::matmul(*w.down, g.data(), T, out);
  else std::copy_n(g.data(), T * I, out);
}

}  // namespace k3
