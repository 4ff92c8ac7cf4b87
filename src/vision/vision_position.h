// The tower's two position signals (shared spec vision.md §4.2, §4.3): the learned 2D table
// bilinearly resized to the patch grid, and the 2D rotary embedding of q and k. Pure functions of
// the grid, so they are tested on their own (tests/vision/test_vision_position.cpp).
#pragma once
#include <cstdint>
#include <vector>

namespace k3::vision {

/// One axis of the bilinear resize with align_corners = false and no antialias (vision.md §4.2,
/// PyTorch F.interpolate(mode="bilinear") with a size): output index i of `out` reads source
/// rows i0 and i1 = min(i0 + 1, in - 1) with weight lambda on i1, where
/// s = max(0, (in / out)·(i + 0.5) − 0.5) in double, i0 = floor(s), lambda = s − i0.
struct BilinearTap {
  int64_t i0 = 0, i1 = 0;
  double lambda = 0;
};
/// Taps of every output index, [out]. Errors: k3::Error when in < 1 or out < 1.
std::vector<BilinearTap> bilinear_taps(int64_t in, int64_t out);

/// The learned position table `table` fp32 [Hpe, Wpe, D] (row, column, channel) resized to the
/// grid: returns fp32 [h·w, D] in patch order (n = r·w + c). (h, w) = (Hpe, Wpe) returns the
/// table unchanged (the reference's shortcut); otherwise each output is
/// (1−λ)(1−μ)E[i0,j0] + (1−λ)μE[i0,j1] + λ(1−μ)E[i1,j0] + λμE[i1,j1] with λ from the row taps
/// (Hpe → h) and μ from the column taps (Wpe → w), evaluated in double and rounded to fp32 once.
/// Errors: k3::Error when a size is < 1.
std::vector<float> interpolate_pos_emb(const float* table, int64_t Hpe, int64_t Wpe, int64_t D, int64_t h, int64_t w);

/// The 2D RoPE of one grid (vision.md §4.3, θ = 10000, head dim dh, F = dh/4 frequencies
/// f_k = θ^(−4k/dh)): complex slot 2k of a head rotates by c·f_k (the column), slot 2k+1 by r·f_k
/// (the row); slot j is the interleaved pair (x[2j], x[2j+1]). Angles, cos and sin in double,
/// stored as fp32: memory (h + w)·F·2 floats.
class Rope2D {
 public:
  /// Errors: k3::Error when dh is not a positive multiple of 4, or h, w outside [1, 512].
  Rope2D(int64_t dh, int64_t h, int64_t w);
  /// Rotates one head vector x [dh] of the patch at grid row r, column c in place:
  /// x'[2j] = x[2j]·cos φ_j − x[2j+1]·sin φ_j, x'[2j+1] = x[2j]·sin φ_j + x[2j+1]·cos φ_j.
  void rotate(float* x, int64_t r, int64_t c) const;
  /// The angle of complex slot `slot` (0 .. dh/2 − 1) at (r, c), in double (for tests).
  double angle(int64_t slot, int64_t r, int64_t c) const;
  int64_t head_dim() const { return dh_; }

 private:
  int64_t dh_, h_, w_, F_;
  std::vector<double> freq_;          // [F]
  std::vector<float> cos_r_, sin_r_;  // [h, F]
  std::vector<float> cos_c_, sin_c_;  // [w, F]
};

}  // namespace k3::vision
