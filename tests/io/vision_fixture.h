// A tiny checkpoint with a real vision tower (vision.md §1.1, §2): the tiny text fixture of
// checkpoint_writer.h plus a vision_config and the table's vision tensors filled with
// deterministic random BF16 weights (linear N(0,1)/sqrt(in), norms 1 + 0.1 N(0,1), position
// table 0.5 N(0,1)), so the tower computes O(1) activations.
#pragma once
#include <cmath>
#include <random>

#include "checkpoint_writer.h"
#include "core/bf16.h"
#include "io/tensor_table.h"

namespace k3test {

/// vision_config of a tiny tower: width 32, 2 heads of 16, MLP 48, 2 blocks, position table 6x4,
/// text_hidden_size 64 (the tiny text fixture's hidden size).
inline nlohmann::json tiny_vision_config_json() {
  return {{"model_type", "moonvit3d"},
          {"patch_size", 14},
          {"vt_hidden_size", 32},
          {"vt_num_hidden_layers", 2},
          {"vt_num_attention_heads", 2},
          {"qkv_hidden_size", 32},
          {"vt_intermediate_size", 48},
          {"init_pos_emb_height", 6},
          {"init_pos_emb_width", 4},
          {"merge_kernel_size", {2, 2}},
          {"mm_hidden_size", 32},
          {"text_hidden_size", 64},
          {"projector_ln_eps", 1e-5},
          {"norm_type", "rmsnorm"},
          {"pos_emb_interpolation_mode", "bilinear"},
          {"mm_projector_type", "patchmergerv2"}};
}

/// The tiny checkpoint with the tower of `vision_config` (its tensors from the tensor table).
inline FxCheckpoint tiny_vision_checkpoint(const nlohmann::json& vision_config = tiny_vision_config_json(),
                                           uint32_t seed = 7) {
  FxCheckpoint ck;
  ck.config = tiny_config_json();
  ck.config["vision_config"] = vision_config;
  const k3::ModelConfig cfg = k3::parse_config(ck.config.dump(), "tiny vision config.json");
  ck.tensors = text_inventory(cfg, "language_model.", 4);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const k3::TensorSpec& s : k3::vision_tensors(cfg)) {
    FxTensor t{s.name, k3::DType::BF16, s.shape, {}};
    const int64_t n = s.numel(), in = n / s.shape[0];
    t.data.resize(static_cast<size_t>(n) * 2);
    for (int64_t i = 0; i < n; ++i) {
      float v = nd(rng);
      if (s.name.find("norm") != std::string::npos) v = 1.0f + 0.1f * v;
      else if (s.role == k3::TensorRole::VisionPosEmb) v *= 0.5f;
      else v /= std::sqrt(static_cast<float>(in));
      const uint16_t h = k3::f32_to_bf16(v);
      t.data[static_cast<size_t>(2 * i)] = static_cast<uint8_t>(h & 0xff);
      t.data[static_cast<size_t>(2 * i + 1)] = static_cast<uint8_t>(h >> 8);
    }
    ck.tensors.push_back(std::move(t));
  }
  return ck;
}

}  // namespace k3test
