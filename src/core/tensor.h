// TensorView: a typed, shaped, read-only view of bytes that live elsewhere
// (normally a memory-mapped safetensors file; never copied).
// Shapes are outermost first, like PyTorch: a Linear weight is [out, in], row-major.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace k3 {

struct TensorView {
  std::string name;  ///< full checkpoint name, e.g. "language_model.lm_head.weight"
  DType dtype = DType::F32;
  std::vector<int64_t> shape;     ///< outermost first
  const uint8_t* data = nullptr;  ///< first byte (inside the mapping); may be unaligned
  uint64_t nbytes = 0;            ///< == numel() * dtype_size(dtype)
  std::string file;               ///< file the bytes live in (for error messages)
  /// Set on the trunk's copies quantized at load (`--trunk-type q8|q4`, kernels/q8q4_trunk.h):
  /// k3::matmul then reads this encoding instead of `data` (which still points to the BF16).
  const struct QuantMatrix* quant = nullptr;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t dim(int i) const { return shape.at(static_cast<size_t>(i)); }
};

/// One compressed-tensors MXFP4 matrix W [rows, cols] (spec §4): `packed` is U8 [rows, cols/2],
/// `scale` is U8 [rows, cols/32]. Both point into the mapping.
struct Mxfp4Matrix {
  const uint8_t* packed = nullptr;
  const uint8_t* scale = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
};

}  // namespace k3
