#include "kernels/ops.h"
#include "kernels/q8q4_trunk.h"

#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/dispatch.h"
#include "kernels/mxfp8.h"
#include "kernels/numerics.h"
#include "kernels/op_profile.h"
#include "kernels/ref/linear.h"
#include "kernels/threads.h"

namespace k3 {

namespace {

constexpr int64_t kRowGrain = 16;    // rows per scheduling unit (multiple of the 4-row block)
constexpr int64_t kTokenGrain = 16;  // tokens per scheduling unit when a GEMM splits tokens

std::string nm(std::string_view name) { return std::string(name); }

void check_tokens(int64_t t, std::string_view name) {
  if (t < 0) throw Error("'" + nm(name) + "': negative token count " + std::to_string(t));
}

void check_mxfp4(const Mxfp4Matrix& w, std::string_view name) {
  if (w.rows < 0 || w.cols < 0 || w.cols % 32 != 0)
    throw Error("MXFP4 matrix '" + nm(name) + "': shape [" + std::to_string(w.rows) + ", " + std::to_string(w.cols) +
                "] needs cols to be a multiple of 32");
  if ((w.packed == nullptr || w.scale == nullptr) && w.rows * w.cols != 0)
    throw Error("MXFP4 matrix '" + nm(name) + "': no data");
}

// True when every y[i] is finite: exponent bits not all ones, OR-reduced without an early exit
// so the loop vectorizes (this runs after every expert FFN).
bool all_finite(const float* y, int64_t n) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &y[i], 4);
    bad |= static_cast<uint32_t>((u & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

// Throws naming the first E8M0 scale byte 0xFF (NaN) of w, if any.
void scan_nan_scales(const Mxfp4Matrix& w, std::string_view name) {
  const int64_t nb = w.cols / 32;
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t b = 0; b < nb; ++b)
      if (w.scale[r * nb + b] == 0xFF)
        throw Error("MXFP4 matrix '" + nm(name) + "': E8M0 scale byte 0xFF (NaN) at row " + std::to_string(r) +
                    ", block " + std::to_string(b) + " (columns " + std::to_string(32 * b) + ".." +
                    std::to_string(32 * b + 31) + ")");
}

// Called after a product with w: when some output is not finite, report a NaN scale byte.
void check_scales_after_nan(const Mxfp4Matrix& w, const float* y, int64_t n, std::string_view name) {
  if (!all_finite(y, n)) scan_nan_scales(w, name);
}

// Activations as bf16 bits [T, ld] (ld = cols rounded up to even), the pair-chain GEMMs' input.
struct Bf16Acts {
  int64_t ld = 0;
  std::vector<uint16_t> v;
};
void round_acts(const float* x, int64_t t, int64_t cols, Bf16Acts& a) {
  a.ld = (cols + 1) & ~int64_t{1};
  a.v.resize(static_cast<size_t>(t * a.ld));
  parallel_for(t, 8, [&](int64_t t0, int64_t t1) {
    for (int64_t j = t0; j < t1; ++j) round_bf16_row(x + j * cols, cols, a.v.data() + j * a.ld);
  });
}
void mxfp8_acts(const float* x, int64_t t, int64_t cols, Bf16Acts& a) {
  a.ld = cols;  // cols % 32 == 0
  a.v.resize(static_cast<size_t>(t * a.ld));
  for (int64_t j = 0; j < t; ++j) quantize_mxfp8_bf16(x + j * cols, cols, a.v.data() + j * a.ld);
}

constexpr int64_t kDpRowGrain = 32;  // the AVX-512 panel height

// Y = X·Wᵀ in the 'bf16' mode: X rounded once, then the pair-chain GEMM split like the fp32 one
// (rows, or tokens for few-row matrices); a row's bits depend on neither split (one chain each).
void matmul_bf16_dp(const KernelTable& kt, const uint16_t* w, int64_t rows, int64_t cols, int64_t ldw, const float* x,
                    int64_t n_tokens, float* y) {
  thread_local Bf16Acts tl_xb;
  Bf16Acts& xb = tl_xb;  // a plain reference: the workers below must read this thread's buffer
  round_acts(x, n_tokens, cols, xb);
  const int64_t row_units = (rows + kDpRowGrain - 1) / kDpRowGrain;
  if (row_units < 2 * num_threads() && n_tokens >= 2 * kTokenGrain) {
    const int64_t units = n_tokens / kTokenGrain;
    parallel_for(units, grain_for_work(1, kTokenGrain * rows * cols), [&](int64_t u0, int64_t u1) {
      const int64_t t0 = u0 * kTokenGrain, t1 = u1 == units ? n_tokens : u1 * kTokenGrain;
      kt.gemm_bf16_dp(w, ldw, cols, xb.v.data() + t0 * xb.ld, xb.ld, t1 - t0, y + t0 * rows, rows, 0, rows);
    });
    return;
  }
  parallel_for(rows, grain_for_work(kDpRowGrain, cols * n_tokens), [&](int64_t r0, int64_t r1) {
    kt.gemm_bf16_dp(w, ldw, cols, xb.v.data(), xb.ld, n_tokens, y, rows, r0, r1);
  });
}

// MXFP4 x MXFP8-quantized activations (pair chain), no NaN-scale scan.
void mxfp4_dp_unscanned(const Mxfp4Matrix& w, const Bf16Acts& xq, int64_t n_tokens, float* y) {
  if (w.rows == 0 || n_tokens == 0) return;
  const KernelTable& kt = kernels();
  parallel_for(w.rows, grain_for_work(kDpRowGrain, w.cols * n_tokens), [&](int64_t r0, int64_t r1) {
    kt.gemm_mxfp4_dp(w.packed, w.scale, w.cols, xq.v.data(), xq.ld, n_tokens, y, w.rows, r0, r1);
  });
}

}  // namespace

void matmul_bf16_raw(const uint16_t* w, int64_t rows, int64_t cols, int64_t ldw, const float* x, int64_t n_tokens,
                     float* y, std::string_view name) {
  check_tokens(n_tokens, name);
  if (rows < 0 || cols < 0 || ldw < cols)
    throw Error("bf16 weight '" + nm(name) + "': bad shape [" + std::to_string(rows) + ", " + std::to_string(cols) +
                "] with row stride " + std::to_string(ldw));
  if (rows == 0 || n_tokens == 0) return;
  if (w == nullptr || (x == nullptr && cols > 0) || y == nullptr)
    throw Error("bf16 weight '" + nm(name) + "': null pointer");
  const KernelTable& kt = kernels();
  if (numerics_mode() == Numerics::Bf16) return matmul_bf16_dp(kt, w, rows, cols, ldw, x, n_tokens, y);
  // Few rows (a router, a small projection) but many tokens: split the tokens instead, so both
  // threads work. Outputs are the same bits either way: every call gets >= kTokenGrain tokens,
  // and for T >= 4 each output's order over K depends on neither the row range nor the token
  // count (tests/kernels/test_gemm_bf16.cpp, test_ops_split.cpp).
  const int64_t row_units = (rows + kRowGrain - 1) / kRowGrain;
  if (row_units < 2 * num_threads() && n_tokens >= 2 * kTokenGrain) {
    // Units of kTokenGrain tokens, the remainder folded into the last unit: no call gets fewer
    // than kTokenGrain tokens (kernels may pick another path for very few tokens, e.g. T == 1).
    const int64_t units = n_tokens / kTokenGrain;
    parallel_for(units, grain_for_work(1, kTokenGrain * rows * cols), [&](int64_t u0, int64_t u1) {
      const int64_t t0 = u0 * kTokenGrain, t1 = u1 == units ? n_tokens : u1 * kTokenGrain;
      kt.gemm_bf16(w, ldw, cols, x + t0 * cols, cols, t1 - t0, y + t0 * rows, rows, 0, rows);
    });
    return;
  }
  parallel_for(rows, grain_for_work(kRowGrain, cols * n_tokens),
               [&](int64_t r0, int64_t r1) { kt.gemm_bf16(w, ldw, cols, x, cols, n_tokens, y, rows, r0, r1); });
}

void matmul_bf16(const TensorView& w, const float* x, int64_t n_tokens, float* y) {
  if (w.shape.size() != 2)
    throw Error("tensor '" + w.name + "': expected a 2-D [out, in] weight, found " + std::to_string(w.shape.size()) +
                " dims");
  if (w.dtype != DType::BF16)
    throw Error("tensor '" + w.name + "': matmul_bf16 needs dtype BF16, found " + std::string(dtype_name(w.dtype)));
  if (w.data == nullptr && w.numel() != 0) throw Error("tensor '" + w.name + "': no data");
  // The mapping may be unaligned: every kernel reads bf16 with unaligned-safe loads.
  matmul_bf16_raw(reinterpret_cast<const uint16_t*>(w.data), w.shape[0], w.shape[1], w.shape[1], x, n_tokens, y,
                  w.name);
}

void matmul(const TensorView& w, const float* x, int64_t n_tokens, float* y) {
  const prof::Scope timer(w.name, static_cast<double>(w.quant ? w.quant->bytes() : w.nbytes));
  if (w.quant) return matmul_quant(*w.quant, x, n_tokens, y);  // trunk quantized at load
  if (w.dtype == DType::F32) {
    check_tokens(n_tokens, w.name);
    ref::matmul(w, x, n_tokens, y);
    return;
  }
  matmul_bf16(w, x, n_tokens, y);
}

void matmul_same_input(std::span<const TensorView* const> ws, const float* x, int64_t n_tokens,
                       std::span<float* const> ys) {
  if (ws.size() != ys.size())
    throw Error("matmul_same_input: " + std::to_string(ws.size()) + " weights but " + std::to_string(ys.size()) +
                " outputs");
  if (ws.empty()) return;
  check_tokens(n_tokens, ws[0]->name);
  bool fuse = ws.size() > 1 && n_tokens > 0 && n_tokens < 2 * kTokenGrain && numerics_mode() != Numerics::Bf16;
  for (const TensorView* w : ws) {
    if (w->shape.size() != 2)
      throw Error("tensor '" + w->name + "': expected a 2-D [out, in] weight, found " +
                  std::to_string(w->shape.size()) + " dims");
    if (w->shape[1] != ws[0]->shape[1])
      throw Error("matmul_same_input: '" + w->name + "' has " + std::to_string(w->shape[1]) + " input columns, '" +
                  ws[0]->name + "' has " + std::to_string(ws[0]->shape[1]) + " (they must read the same input)");
    if (w->quant || w->dtype != DType::BF16 || (w->data == nullptr && w->numel() != 0)) fuse = false;
  }
  if (!fuse) {
    for (size_t i = 0; i < ws.size(); ++i) matmul(*ws[i], x, n_tokens, ys[i]);
    return;
  }
  const int64_t K = ws[0]->shape[1];
  // Units of kRowGrain rows of one weight (a weight's last unit may be shorter): the same row
  // boundaries (multiples of kRowGrain from each weight's row 0) as matmul_bf16_raw's row split.
  struct Unit {
    int32_t w;
    int64_t r0, r1;
  };
  std::vector<Unit> units;
  double bytes = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    const int64_t rows = ws[i]->shape[0];
    for (int64_t r = 0; r < rows; r += kRowGrain)
      units.push_back({static_cast<int32_t>(i), r, std::min(rows, r + kRowGrain)});
    bytes += static_cast<double>(ws[i]->nbytes);
  }
  std::string label;  // per-op timer row, e.g. "self_attn.q_proj+k_proj+v_proj"
  if (prof::enabled()) {
    label = prof::op_name(ws[0]->name);
    for (size_t i = 1; i < ws.size(); ++i) {
      const std::string n = prof::op_name(ws[i]->name);
      label += "+" + n.substr(n.rfind('.') == std::string::npos ? 0 : n.rfind('.') + 1);
    }
  }
  const prof::Scope timer(label, bytes);
  const KernelTable& kt = kernels();
  parallel_for(static_cast<int64_t>(units.size()), grain_for_work(1, kRowGrain * K * n_tokens),
               [&](int64_t u0, int64_t u1) {
                 for (int64_t u = u0; u < u1;) {
                   int64_t v = u + 1;  // consecutive units of the same weight: one kernel call
                   while (v < u1 && units[v].w == units[u].w) ++v;
                   const TensorView& w = *ws[units[u].w];
                   kt.gemm_bf16(reinterpret_cast<const uint16_t*>(w.data), K, K, x, K, n_tokens, ys[units[u].w],
                                w.shape[0], units[u].r0, units[v - 1].r1);
                   u = v;
                 }
               });
}

void quantize_q8(const float* x, int64_t n_tokens, int64_t cols, Q8Activations& out) {
  if (cols < 0 || cols % 32 != 0 || n_tokens < 0)
    throw Error("quantize_q8: [" + std::to_string(n_tokens) + ", " + std::to_string(cols) +
                "] needs cols to be a multiple of 32");
  out.n_tokens = n_tokens;
  out.cols = cols;
  out.q.resize(static_cast<size_t>(n_tokens * cols));
  out.s.resize(static_cast<size_t>(n_tokens * (cols / 32)));
  const KernelTable& kt = kernels();
  for (int64_t t = 0; t < n_tokens; ++t)
    kt.quantize_q8(x + t * cols, cols, out.q.data() + t * cols, out.s.data() + t * (cols / 32));
}

namespace {
// matmul_mxfp4_q8 without the NaN-scale scan (the caller scans once at the end of a chain).
void mxfp4_q8_unscanned(const Mxfp4Matrix& w, const Q8Activations& xq, float* y, std::string_view name) {
  check_mxfp4(w, name);
  if (xq.cols != w.cols)
    throw Error("MXFP4 matrix '" + nm(name) + "': activations have " + std::to_string(xq.cols) +
                " columns, matrix has " + std::to_string(w.cols));
  if (w.rows == 0 || xq.n_tokens == 0) return;
  const KernelTable& kt = kernels();
  parallel_for(w.rows, grain_for_work(kRowGrain, w.cols * xq.n_tokens), [&](int64_t r0, int64_t r1) {
    kt.gemm_mxfp4_q8(w.packed, w.scale, w.cols, xq.q.data(), xq.s.data(), xq.n_tokens, y, w.rows, r0, r1);
  });
}
}  // namespace

void matmul_mxfp4_q8(const Mxfp4Matrix& w, const Q8Activations& xq, float* y, std::string_view name) {
  mxfp4_q8_unscanned(w, xq, y, name);
  if (w.rows > 0) check_scales_after_nan(w, y, xq.n_tokens * w.rows, name);
}

void matmul_mxfp4(const Mxfp4Matrix& w, const float* x, int64_t n_tokens, float* y, Mxfp4Path path,
                  std::string_view name) {
  check_mxfp4(w, name);
  check_tokens(n_tokens, name);
  if (w.rows == 0 || n_tokens == 0) return;
  if (path == Mxfp4Path::Mxfp8) {
    thread_local Bf16Acts xq;
    mxfp8_acts(x, n_tokens, w.cols, xq);
    mxfp4_dp_unscanned(w, xq, n_tokens, y);
    check_scales_after_nan(w, y, n_tokens * w.rows, name);
    return;
  }
  if (path == Mxfp4Path::Int8) {
    thread_local Q8Activations xq;  // scratch reused across calls on this thread
    quantize_q8(x, n_tokens, w.cols, xq);
    matmul_mxfp4_q8(w, xq, y, name);
    return;
  }
  const KernelTable& kt = kernels();
  parallel_for(w.rows, grain_for_work(kRowGrain, w.cols * n_tokens), [&](int64_t r0, int64_t r1) {
    kt.gemm_mxfp4_f32(w.packed, w.scale, w.cols, x, w.cols, n_tokens, y, w.rows, r0, r1);
  });
  check_scales_after_nan(w, y, n_tokens * w.rows, name);
}

void mxfp4_glu_ffn(const Mxfp4Matrix& w1, const Mxfp4Matrix& w3, const Mxfp4Matrix& w2, const float* z,
                   int64_t n_tokens, const GluAct& act, float* y, Mxfp4Path path, std::string_view name) {
  check_tokens(n_tokens, name);
  if (w1.rows != w3.rows || w1.cols != w3.cols || w2.cols != w1.rows)
    throw Error("expert '" + nm(name) + "': w1 [" + std::to_string(w1.rows) + ", " + std::to_string(w1.cols) +
                "], w3 [" + std::to_string(w3.rows) + ", " + std::to_string(w3.cols) + "], w2 [" +
                std::to_string(w2.rows) + ", " + std::to_string(w2.cols) +
                "] do not chain (need w1 == w3 and w2.cols == w1.rows)");
  if (n_tokens == 0) return;
  const std::string n1 = nm(name) + " w1", n3 = nm(name) + " w3", n2 = nm(name) + " w2";
  thread_local std::vector<float> g, u;
  g.resize(static_cast<size_t>(n_tokens * w1.rows));
  u.resize(g.size());
  if (path == Mxfp4Path::Int8) {
    thread_local Q8Activations zq, hq;
    quantize_q8(z, n_tokens, w1.cols, zq);
    mxfp4_q8_unscanned(w1, zq, g.data(), n1);
    mxfp4_q8_unscanned(w3, zq, u.data(), n3);
    // Scan g and u here, not only y: a NaN must not be hidden by the activation's clamping.
    if (!all_finite(g.data(), n_tokens * w1.rows)) scan_nan_scales(w1, n1);
    if (!all_finite(u.data(), n_tokens * w3.rows)) scan_nan_scales(w3, n3);
    glu_activation(g.data(), u.data(), g.data(), static_cast<int64_t>(g.size()), act);
    quantize_q8(g.data(), n_tokens, w2.cols, hq);
    mxfp4_q8_unscanned(w2, hq, y, n2);
    if (!all_finite(y, n_tokens * w2.rows)) scan_nan_scales(w2, n2);
    return;
  }
  if (path == Mxfp4Path::Mxfp8) {  // z quantized once for w1 and w3, the activation once for w2
    thread_local Bf16Acts zq, hq;
    check_mxfp4(w1, n1);
    check_mxfp4(w3, n3);
    check_mxfp4(w2, n2);
    mxfp8_acts(z, n_tokens, w1.cols, zq);
    mxfp4_dp_unscanned(w1, zq, n_tokens, g.data());
    mxfp4_dp_unscanned(w3, zq, n_tokens, u.data());
    if (!all_finite(g.data(), n_tokens * w1.rows)) scan_nan_scales(w1, n1);
    if (!all_finite(u.data(), n_tokens * w3.rows)) scan_nan_scales(w3, n3);
    glu_activation(g.data(), u.data(), g.data(), static_cast<int64_t>(g.size()), act);
    mxfp8_acts(g.data(), n_tokens, w2.cols, hq);
    mxfp4_dp_unscanned(w2, hq, n_tokens, y);
    if (!all_finite(y, n_tokens * w2.rows)) scan_nan_scales(w2, n2);
    return;
  }
  matmul_mxfp4(w1, z, n_tokens, g.data(), path, n1);
  matmul_mxfp4(w3, z, n_tokens, u.data(), path, n3);
  glu_activation(g.data(), u.data(), g.data(), static_cast<int64_t>(g.size()), act);
  matmul_mxfp4(w2, g.data(), n_tokens, y, path, n2);
}

void glu_activation(const float* g, const float* u, float* out, int64_t n, const GluAct& act) {
  if (act.situ) {
    situ_glu(g, u, out, n, act.beta, act.linear_beta);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {  // SwiGLU (not K3's; scalar)
    const float gi = g[i];
    const float sig = gi >= 0.f ? 1.f / (1.f + std::exp(-gi)) : std::exp(gi) / (1.f + std::exp(gi));
    out[i] = gi * sig * u[i];
  }
}

void situ_glu(const float* g, const float* u, float* out, int64_t n, float beta1, float beta2) {
  if (!(beta1 > 0.f)) throw Error("situ_glu: activation_situ_beta must be > 0, got " + std::to_string(beta1));
  if (n < 0) throw Error("situ_glu: negative length");
  if (n == 0) return;
  const KernelTable& kt = kernels();
  parallel_for(n, 4096, [&](int64_t b, int64_t e) { kt.situ_glu(g + b, u + b, out + b, e - b, beta1, beta2); });
}

}  // namespace k3
