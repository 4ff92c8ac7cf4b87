// Trunk quantization: encoder, scalar oracle, scalar fp32 rows, dispatch (kernels/q8q4_trunk.h).
#include "kernels/q8q4_trunk.h"

#include <cmath>
#include <cstring>

#include "core/bf16.h"
#include "core/error.h"
#include "kernels/exec_config.h"
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
  const float d = w.d[static_cast<size_t>(r * (w.cols / 32) + j / 32)];
  if (w.kind == QuantKind::Q8) return d * static_cast<float>(w.q[static_cast<size_t>(r * w.cols + j)]);
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
  m.d.resize(static_cast<size_t>(m.rows * G));
  m.q.assign(static_cast<size_t>(kind == QuantKind::Q8 ? m.rows * m.cols : m.rows * m.cols / 2), 0);
  float v[32];
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t g = 0; g < G; ++g) {
      float amax = 0;
      for (int i = 0; i < 32; ++i) {
        v[i] = load_elem(w, r * m.cols + g * 32 + i);
        if (!std::isfinite(v[i]))
          throw Error("trunk quantization: tensor '" + w.name + "': non-finite value at row " + std::to_string(r) +
                      ", column " + std::to_string(g * 32 + i));
        amax = std::fmax(amax, std::fabs(v[i]));
      }
      const float d = amax / qmax;
      m.d[static_cast<size_t>(r * G + g)] = d;
      const float inv = d > 0 ? 1.f / d : 0.f;
      for (int i = 0; i < 32; ++i) {
        const int q = static_cast<int>(std::nearbyint(std::fmin(qmax, std::fmax(-qmax, v[i] * inv))));
        const int64_t j = g * 32 + i;
        if (kind == QuantKind::Q8) {
          m.q[static_cast<size_t>(r * m.cols + j)] = static_cast<int8_t>(q);
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
}  // namespace detail

void matmul_quant(const QuantMatrix& w, const float* x, int64_t T, float* y) {
  if (T < 0) throw Error("matmul_quant '" + w.name + "': negative token count");
  if (T == 0 || w.rows == 0) return;
  const KernelTable& kt = kernels();
  const int64_t grain = grain_for_work(8, w.cols * T);
  parallel_for(w.rows, grain, [&](int64_t r0, int64_t r1) { kt.quant_rows(w, x, T, y, w.rows, r0, r1); });
}

}  // namespace k3
