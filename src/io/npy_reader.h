// Reading a NumPy .npy array (format versions 1.0, 2.0 and 3.0; little-endian float32 or float64,
// C order) from bytes, for user inputs such as `k3 vision --patches FILE.npy`. The header is
// untrusted: every field is checked and the sizes are overflow-checked before anything is read.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/read_file.h"

namespace k3 {

/// An .npy array as float32: `shape` outermost first, `data` prod(shape) values in C order.
struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

/// Parses the bytes of an .npy file. descr '<f4' is copied; '<f8' is rounded to float32 (RNE).
/// Errors (k3::Error starting with `what`): a wrong magic string or version, a truncated or
/// malformed header dict (keys descr, fortran_order, shape), another dtype (named), Fortran
/// order, a negative or overflowing dimension, a data size other than prod(shape)·itemsize.
NpyArray parse_npy(std::string_view bytes, const std::string& what);

/// Reads `path` (bounded by `limits`, core/read_file.h) and parses it. Errors: those of
/// read_file_bounded and parse_npy, naming `what` and the path.
NpyArray read_npy(const std::string& path, const std::string& what, const ReadLimits& limits);

}  // namespace k3
