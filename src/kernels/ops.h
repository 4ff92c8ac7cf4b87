// k3 kernel ops: the public, dispatched, multi-threaded CPU kernels. Each op checks its
// arguments (k3::Error), splits output rows across num_threads() workers (threads.h) and runs the
// kernel table and numerics mode of the calling thread's execution context (exec_config.h).
//
// Shapes are outermost first, row-major; activations are fp32; a Linear weight W is [out, in].
// Spec: k3-architecture.md §3 (forward math), §4 (MXFP4); algorithms.md §5.3 (MXFP4 dot).
#pragma once
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "kernels/numerics.h"

namespace k3 {

/// Y [T, out] = X [T, in] · Wᵀ for a BF16 weight W [out, in] (`w.dtype` must be BF16, 2-D).
/// fp32 accumulation; T == 1 is the decode GEMV (memory-bound), T > 1 the prefill GEMM (each
/// weight row is read once per token tile). y must not alias x. Numerics mode 'bf16'
/// (numerics.h): X is rounded to bf16 (RNE) and multiplied on vdpbf16ps / its emulation
/// (kernel_table.h gemm_bf16_dp; |err| <= 2^-8·Σ|w·x| + fp32 accumulation); otherwise exact fp32.
/// Errors: k3::Error naming w.name when W is not 2-D BF16, has no data, or T < 0.
void matmul_bf16(const TensorView& w, const float* x, int64_t n_tokens, float* y);

/// Drop-in replacement of k3::ref::matmul for the forward pass: Y [T, out] = X [T, in] · Wᵀ.
/// BF16 weights take the dispatched kernels above; F32 weights (small, never hot) the fp32 oracle;
/// a view with `quant` set (trunk quantized at load) k3::matmul_quant (kernels/q8q4_trunk.h).
/// Errors: as matmul_bf16 (dtype must be BF16 or F32).
void matmul(const TensorView& w, const float* x, int64_t n_tokens, float* y);

/// Y_i [T, out_i] = X [T, in] · W_iᵀ for several weights that read the same X (the projections
/// of one layer input, e.g. KDA's q/k/v/f_a/b/g): for decode-sized T (< 32) with BF16 weights
/// in the exact trunk mode, one parallel region over all their rows (row units of 16 per
/// weight, the same boundaries and kernel as matmul's row split, so every output is bit-identical
/// to matmul() per weight) instead of one region and barrier per weight; otherwise matmul() per
/// weight. ys[i] holds [T, out_i] and must not alias x. Errors: k3::Error when the counts of
/// weights and outputs differ, a weight is not 2-D, or the input widths differ (naming both).
void matmul_same_input(std::span<const TensorView* const> ws, const float* x, int64_t n_tokens,
                       std::span<float* const> ys);

/// Same on raw bf16 bits: W [rows, cols] with row stride `ldw` (elements, >= cols), e.g. a
/// slice of heads. `name` is used in error messages only.
void matmul_bf16_raw(const uint16_t* w, int64_t rows, int64_t cols, int64_t ldw, const float* x, int64_t n_tokens,
                     float* y, std::string_view name = "bf16 weight");

/// Activations quantized per 32-block to int8 (Q8_0 style: s = amax/127, q = RNE(x/s)), for the
/// MXFP4 integer path. q [T, cols] int8 in the kernels' nibble order, s [T, cols/32] fp32.
/// A block holding NaN/Inf gets s = NaN (so results become NaN, never silently wrong).
struct Q8Activations {
  int64_t n_tokens = 0, cols = 0;
  std::vector<int8_t> q;
  std::vector<float> s;
};
/// Quantizes X [T, cols] (cols % 32 == 0). Quantize once, reuse for every matrix reading the same
/// input (e.g. the latent z for w1 and w3 of all selected experts). Errors: cols % 32 != 0.
void quantize_q8(const float* x, int64_t n_tokens, int64_t cols, Q8Activations& out);

/// Y [T, rows] = X [T, cols] · Wᵀ for an MXFP4 matrix W [rows, cols] computed on the packed bytes
/// (never dequantizing the matrix). Int8 path error: per 32-block |err| <= 0.5·s_a·Σ|w_i|
/// (activation rounding only; weights and integer sums are exact), plus fp32 accumulation.
/// Errors (k3::Error, naming `name`): cols % 32 != 0, null data, T < 0, or an E8M0 scale byte
/// 0xFF (NaN) — detected cheaply: the kernels map 0xFF to NaN, and only when an output is not
/// finite are the scales scanned to report the row and block.
void matmul_mxfp4(const Mxfp4Matrix& w, const float* x, int64_t n_tokens, float* y, Mxfp4Path path = Mxfp4Path::Int8,
                  std::string_view name = "mxfp4 weight");
/// Int8 path with pre-quantized activations (xq.cols == w.cols). Y [xq.n_tokens, w.rows].
void matmul_mxfp4_q8(const Mxfp4Matrix& w, const Q8Activations& xq, float* y, std::string_view name = "mxfp4 weight");

/// The gated activation of an MLP: SiTU-GLU (K3, hidden_act "situ") or SwiGLU ("silu").
struct GluAct {
  bool situ = true;          ///< false: SwiGLU, out = g·σ(g)·u
  float beta = 4.f;          ///< activation_situ_beta (β1)
  float linear_beta = 25.f;  ///< activation_situ_linear_beta (β2); <= 0: absent (up = u)
};
/// out[i] = act(g[i], u[i]) over n values (out may alias g or u). SiTU uses the dispatched
/// situ_glu kernel. Errors: as situ_glu.
void glu_activation(const float* g, const float* u, float* out, int64_t n, const GluAct& act);

/// One routed expert (k3-architecture.md §3.6 step 5) for the n tokens routed to it, on the
/// packed MXFP4 bytes: Y [n, rows(w2)] = W2 · act(W1 z, W3 z) with z [n, cols(w1)] fp32.
/// Int8 path: z is quantized once for W1 and W3, the activation output once for W2. Every weight
/// is read once per call whatever n is (decode n = 1; prefill groups a chunk's tokens per expert).
/// Errors: shape mismatch between w1/w3/w2, plus those of matmul_mxfp4 (naming `name`).
void mxfp4_glu_ffn(const Mxfp4Matrix& w1, const Mxfp4Matrix& w3, const Mxfp4Matrix& w2, const float* z,
                   int64_t n_tokens, const GluAct& act, float* y, Mxfp4Path path = Mxfp4Path::Int8,
                   std::string_view name = "expert");

/// Fused SiTU-GLU (k3-architecture.md §3.4), element-wise over n values:
/// out = β1·tanh(g/β1)·σ(g) · β2·tanh(u/β2); beta2 <= 0 means "no linear beta" (up = u).
/// out may alias g or u. Max relative error vs fp64 ≈ 1e-6 (SIMD exp/tanh polynomials).
/// Errors: beta1 <= 0, n < 0.
void situ_glu(const float* g, const float* u, float* out, int64_t n, float beta1, float beta2);

}  // namespace k3
