// Trunk quantization: encoder, scalar oracle, scalar fp32 rows, dispatch (kernels/q8q4_trunk.h).
#include "kernels/q8q4_trunk.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/bf16.h"
#include "core/error.h"
#include "kernels/dispatch.h"
#include "kernels/exec_config.h"
#include "kernels/numerics.h"
#include "kernels/threads.h"

namespace k3 {

namespace {

float load_elem(const TensorView& w, int64_t i) {
  if (w.dtype == DType::BF16) {
    uint16_t h;
    std::memcpy(&h, w.data + 2 * i, 2);
    return bf16_to_f32(h);
  }
  float f;
  std::memcpy(&f, w.data + 4 * i, 4);
  return f;
}

/// Decoded weight j of row r (d·q in fp32).
inline float decoded(const QuantMatrix& w, int64_t r, int64_t j) {
  const float d = w.scale(r, j / 32);
  if (w.kind == QuantKind::Q8) return d * static_cast<float>(w.q8(r, j));
  const uint8_t b = static_cast<uint8_t>(w.q[static_cast<size_t>((r * w.cols + j) / 2)]);
  const int nib = (j % 2 == 0) ? (b & 0x0F) : (b >> 4);
  return d * static_cast<float>(nib >= 8 ? nib - 16 : nib);
}

}  // namespace

QuantMatrix quantize_matrix(const TensorView& w, QuantKind kind) {
  if (w.shape.size() != 2 || (w.dtype != DType::BF16 && w.dtype != DType::F32) || !w.data)
    throw Error("trunk quantization: tensor '" + w.name + "': expected a 2-D BF16 or F32 matrix with data");
  QuantMatrix m;
  m.kind = kind;
  m.rows = w.shape[0];
  m.cols = w.shape[1];
  m.name = w.name;
  if (m.cols % 32 != 0)
    throw Error("trunk quantization: tensor '" + w.name + "': " + std::to_string(m.cols) +
                " columns, expected a multiple of 32 (the group size)");
  const int64_t G = m.cols / 32;
  const float qmax = kind == QuantKind::Q8 ? 127.f : 7.f;
  const bool q8 = kind == QuantKind::Q8;
  m.d.assign(static_cast<size_t>((q8 ? m.rows16() : m.rows) * G), 0.f);
  m.q.assign(static_cast<size_t>(q8 ? m.rows16() * m.cols : m.rows * m.cols / 2), 0);
  float v[32];
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t g = 0; g < G; ++g) {
      float amax = 0;
      for (int i = 0; i < 32; ++i) {
        v[i] = load_elem(w, r * m.cols + g * 32 + i);
        if (!std::isfinite(v[i]))
          throw Error("trunk quantization: tensor '" + w.name + "': non-finite value at row " + std::to_string(r) +
                      ", column " + std::to_string(g * 32 + i));
        amax = std::max(amax, std::fabs(v[i]));  // (finite here: std::max is fmax)
      }
      const float d = amax / qmax;
      m.d[static_cast<size_t>(q8 ? (r / 16) * 16 * G + g * 16 + r % 16 : r * G + g)] = d;
      const float inv = d > 0 ? 1.f / d : 0.f;
      for (int i = 0; i < 32; ++i) {
        // RNE of a value in [-127, 127] as (v + 1.5·2^23) - 1.5·2^23: exact, the same as
        // std::nearbyint in the default rounding mode, without a libm call per element.
        constexpr float kRne = 12582912.f;
        const float c = std::min(qmax, std::max(-qmax, v[i] * inv));
        const int q = static_cast<int>((c + kRne) - kRne);
        const int64_t j = g * 32 + i;
        if (q8) {
          m.q[static_cast<size_t>(m.q8_index(r, j))] = static_cast<int8_t>(q);
        } else {
          uint8_t& b = reinterpret_cast<uint8_t&>(m.q[static_cast<size_t>((r * m.cols + j) / 2)]);
          const uint8_t nib = static_cast<uint8_t>(q & 0x0F);
          b = static_cast<uint8_t>(i % 2 == 0 ? (b & 0xF0) | nib : (b & 0x0F) | (nib << 4));
        }
      }
    }
  return m;
}

namespace ref {
void matmul_quant(const QuantMatrix& w, const float* x, int64_t T, float* y) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = 0; r < w.rows; ++r) {
      double acc = 0;
      for (int64_t j = 0; j < w.cols; ++j) acc += static_cast<double>(decoded(w, r, j)) * x[t * w.cols + j];
      y[t * w.rows + r] = static_cast<float>(acc);
    }
}
}  // namespace ref

namespace detail {
// Per (row, token): per group, the 32 decoded weights times x summed in fp32 in element order,
// then added to the row sum (the same order on every call).
void quant_rows_scalar(const QuantMatrix& w, const float* x, int64_t T, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t G = w.cols / 32;
  float wd[32];
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t t = 0; t < T; ++t) {
      float acc = 0;
      for (int64_t g = 0; g < G; ++g) {
        for (int i = 0; i < 32; ++i) wd[i] = decoded(w, r, g * 32 + i);
        float s = 0;
        const float* xt = x + t * w.cols + g * 32;
        for (int i = 0; i < 32; ++i) s += wd[i] * xt[i];
        acc += s;
      }
      y[t * ldy + r] = acc;
    }
}

void gemm_q8_q8_scalar(const QuantMatrix& w, const int8_t* xq, const float* xs, const int32_t* /*xsum*/, int64_t T,
                       float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t G = w.cols / 32, K = w.cols;
  for (int64_t r = r0; r < r1; ++r) {
    const int8_t* tile = w.q.data() + (r / 16) * 16 * K + (r % 16) * 4;
    const float* dt = w.d.data() + (r / 16) * 16 * G + r % 16;
    for (int64_t t = 0; t < T; ++t) {
      float acc = 0.f;
      for (int64_t b = 0; b < G; ++b) {
        const int8_t* xb = xq + t * K + b * 32;
        int32_t isum = 0;
        for (int p = 0; p < 32; ++p) isum += static_cast<int32_t>(tile[(b * 8 + p / 4) * 64 + p % 4]) * xb[p];
        acc = std::fma(static_cast<float>(isum), dt[b * 16] * xs[t * G + b], acc);
      }
      y[t * ldy + r] = acc;
    }
  }
}
}  // namespace detail

void matmul_quant_f32(const QuantMatrix& w, const float* x, int64_t T, float* y) {
  if (T < 0) throw Error("matmul_quant '" + w.name + "': negative token count");
  if (T == 0 || w.rows == 0) return;
  const KernelTable& kt = kernels();
  const int64_t grain = grain_for_work(8, w.cols * T);
  parallel_for(w.rows, grain, [&](int64_t r0, int64_t r1) { kt.quant_rows(w, x, T, y, w.rows, r0, r1); });
}

void matmul_quant_q8(const QuantMatrix& w, const float* x, int64_t T, float* y) {
  if (T < 0) throw Error("matmul_quant '" + w.name + "': negative token count");
  if (w.kind != QuantKind::Q8)
    throw Error("matmul_quant '" + w.name + "': int8 activations need a q8 matrix (this one is q4)");
  if (T == 0 || w.rows == 0) return;
  const KernelTable& kt = kernels();
  const int64_t K = w.cols, G = K / 32;
  // Per thread, reused across calls (decode calls this ~10 times per layer with T <= 32).
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> xs;
  thread_local std::vector<int32_t> xsum;
  xq.resize(static_cast<size_t>(T * K));
  xs.resize(static_cast<size_t>(T * G));
  xsum.resize(static_cast<size_t>(T * G));
  for (int64_t t = 0; t < T; ++t) {
    kt.quantize_q8(x + t * K, K, xq.data() + t * K, xs.data() + t * G);
    for (int64_t b = 0; b < G; ++b) {
      int32_t s = 0;
      for (int i = 0; i < 32; ++i) s += xq[static_cast<size_t>(t * K + b * 32 + i)];
      xsum[static_cast<size_t>(t * G + b)] = s;
    }
  }
  // (thread_locals are not captured: the workers get the caller's buffers by pointer)
  const int8_t* q = xq.data();
  const float* s = xs.data();
  const int32_t* sum = xsum.data();
  const int64_t tiles = w.rows16() / 16;
  parallel_for(tiles, grain_for_work(1, 16 * K * T), [&](int64_t u0, int64_t u1) {
    kt.gemm_q8_q8(w, q, s, sum, T, y, w.rows, 16 * u0, std::min(w.rows, 16 * u1));
  });
}

void matmul_quant(const QuantMatrix& w, const float* x, int64_t T, float* y) {
  if (w.kind == QuantKind::Q8 && numerics_mode() == Numerics::Int8) return matmul_quant_q8(w, x, T, y);
  matmul_quant_f32(w, x, T, y);
}

}  // namespace k3
