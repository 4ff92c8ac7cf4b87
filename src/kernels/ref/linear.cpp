#include "kernels/ref/linear.h"

#include <cstring>
#include <string>

#include "core/bf16.h"
#include "core/error.h"

namespace k3::ref {

namespace {

void check_2d(const TensorView& w) {
  if (w.shape.size() != 2)
    throw Error("tensor '" + w.name + "': expected a 2-D [out, in] weight, found " + std::to_string(w.shape.size()) +
                " dims");
  if (w.dtype != DType::BF16 && w.dtype != DType::F32)
    throw Error("tensor '" + w.name + "': expected dtype BF16 or F32 for a linear weight, found " +
                std::string(dtype_name(w.dtype)));
  if (w.data == nullptr && w.numel() != 0) throw Error("tensor '" + w.name + "': no data");
}

void check_rows(const TensorView& w, int64_t row_begin, int64_t n_rows) {
  check_2d(w);
  if (row_begin < 0 || n_rows < 0 || row_begin + n_rows > w.shape[0])
    throw Error("tensor '" + w.name + "': row range [" + std::to_string(row_begin) + ", " +
                std::to_string(row_begin + n_rows) + ") outside " + std::to_string(w.shape[0]) + " rows");
}

// Element c of a row starting at byte `row` (unaligned-safe).
inline float load(const uint8_t* row, int64_t c, DType dt) {
  if (dt == DType::BF16) {
    uint16_t h;
    std::memcpy(&h, row + 2 * c, 2);
    return bf16_to_f32(h);
  }
  float f;
  std::memcpy(&f, row + 4 * c, 4);
  return f;
}

inline const uint8_t* row_ptr(const TensorView& w, int64_t r) {
  return w.data + static_cast<uint64_t>(r) * static_cast<uint64_t>(w.shape[1]) * dtype_size(w.dtype);
}

double dot_row(const TensorView& w, int64_t r, const float* x) {
  const uint8_t* row = row_ptr(w, r);
  const int64_t n = w.shape[1];
  double acc = 0.0;
  for (int64_t c = 0; c < n; ++c) acc += static_cast<double>(load(row, c, w.dtype)) * x[c];
  return acc;
}

}  // namespace

void matvec(const TensorView& w, const float* x, float* y) {
  check_2d(w);
  matvec_rows(w, 0, w.shape[0], x, y);
}

void matvec_rows(const TensorView& w, int64_t row_begin, int64_t n_rows, const float* x, float* y) {
  check_rows(w, row_begin, n_rows);
  for (int64_t i = 0; i < n_rows; ++i) y[i] = static_cast<float>(dot_row(w, row_begin + i, x));
}

void matvec_t_rows(const TensorView& w, int64_t row_begin, int64_t n_rows, const float* x, float* y) {
  check_rows(w, row_begin, n_rows);
  const int64_t n = w.shape[1];
  for (int64_t c = 0; c < n; ++c) {
    double acc = 0.0;
    for (int64_t i = 0; i < n_rows; ++i) acc += static_cast<double>(load(row_ptr(w, row_begin + i), c, w.dtype)) * x[i];
    y[c] = static_cast<float>(acc);
  }
}

void matmul(const TensorView& w, const float* x, int64_t n_tokens, float* y) {
  check_2d(w);
  const int64_t in = w.shape[1], out = w.shape[0];
  for (int64_t t = 0; t < n_tokens; ++t) matvec_rows(w, 0, out, x + t * in, y + t * out);
}

void decode_row(const TensorView& w, int64_t row, float* out) {
  check_rows(w, row, 1);
  const uint8_t* p = row_ptr(w, row);
  for (int64_t c = 0; c < w.shape[1]; ++c) out[c] = load(p, c, w.dtype);
}

}  // namespace k3::ref
