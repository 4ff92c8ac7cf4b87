// Helpers for the model tests: in-memory BF16 tensors and tiny generated checkpoints.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>
#include <unistd.h>

#include "core/bf16.h"
#include "core/tensor.h"

namespace k3test {

/// A BF16 [rows, cols] tensor that owns its bytes, filled with N(0, 1)/sqrt(cols) values.
struct OwnedBf16 {
  std::vector<uint16_t> bits;
  k3::TensorView view;
  OwnedBf16(const std::string& name, int64_t rows, int64_t cols, std::mt19937& rng, float scale = 1.f) {
    std::normal_distribution<float> nd(0.f, scale / std::sqrt(static_cast<float>(cols)));
    bits.resize(static_cast<size_t>(rows * cols));
    for (auto& b : bits) b = k3::f32_to_bf16(nd(rng));
    view.name = name;
    view.dtype = k3::DType::BF16;
    view.shape = {rows, cols};
    view.data = reinterpret_cast<const uint8_t*>(bits.data());
    view.nbytes = bits.size() * 2;
  }
  float at(int64_t r, int64_t c) const { return k3::bf16_to_f32(bits[r * view.shape[1] + c]); }
};

inline std::vector<float> randn(size_t n, std::mt19937& rng, float sd = 1.f) {
  std::normal_distribution<float> nd(0.f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

/// ‖a − b‖₂ / ‖b‖₂ over n values.
inline double rel_l2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1e-300));
}

/// Directory of a tiny random K3 checkpoint made by tools/reference/gen_tiny.py (cached under
/// the build tree; generated atomically so parallel test processes can share it).
inline std::filesystem::path tiny_checkpoint(const std::string& variant, int seed) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(K3_BINARY_DIR) / "test-model-data";
  const fs::path dir = root / (variant + "-" + std::to_string(seed));
  if (fs::exists(dir / "config.json")) return dir;
  fs::create_directories(root);
  const fs::path tmp = root / (variant + "-" + std::to_string(seed) + ".tmp" + std::to_string(::getpid()));
  const std::string py = std::string(K3_SOURCE_DIR) + "/.venv/bin/python";
  const std::string cmd = py + " " + K3_SOURCE_DIR + "/tools/reference/gen_tiny.py --out '" + tmp.string() +
                          "' --variant " + variant + " --seed " + std::to_string(seed) + " > /dev/null";
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << "generator failed: " << cmd;
    return dir;
  }
  std::error_code ec;
  fs::rename(tmp, dir, ec);  // loses the race harmlessly when another process was first
  if (ec) fs::remove_all(tmp, ec);
  return dir;
}

}  // namespace k3test
