// The SiTU-GLU MLP (spec k3-architecture.md §3.4–§3.5): out = W_down · act(W_gate x, W_up x).
// Used by layer 0 (dense, width intermediate_size), by the fused shared experts of every MoE
// layer (width num_shared_experts·moe_intermediate_size) and, with MXFP4 weights, by each routed
// expert (model/latent_moe.cpp).
#pragma once
#include <cstdint>
#include <optional>

#include "io/config.h"
#include "model/exec.h"
#include "model/weights.h"

namespace k3 {

/// The GLU activation of the config: SiTU (hidden_act "situ", betas from config) or SwiGLU
/// (hidden_act "silu", Kimi-Linear-family default).
struct GluActivation {
  bool situ = true;
  float beta = 4.f;                  ///< activation_situ_beta
  std::optional<float> linear_beta;  ///< activation_situ_linear_beta (absent: up untransformed)
  float operator()(float g, float u) const;
  /// Throws k3::Error on a hidden_act other than "situ" / "silu".
  static GluActivation from(const ModelConfig& c);
};

/// out[t] = W_down · act(W_gate x[t], W_up x[t]); x: [T, D] fp32, out: [T, D] (must not alias x).
/// ex.fast: k3::matmul (each weight read once for all T tokens) + glu_activation; otherwise the
/// k3::ref oracle. With w.down null, out receives the activations act(W_gate x, W_up x) instead,
/// [T, I] (I = gate rows: a rank's intermediate columns under the split, model/k3_model.cpp).
void glu_mlp_forward(const GluMlpWeights& w, const GluActivation& act, const float* x, int64_t T, float* out,
                     const ExecOptions& ex = {});

/// The kernels' form of `a` (kernels/ops.h GluAct; absent linear beta -> 0).
GluAct to_glu_act(const GluActivation& a);

}  // namespace k3
