// The image preprocessing configuration (the `media_proc_cfg` keys of K3's preprocessor_config.json
// that the K3 image processor reads, shared/spec/vision.md §1.2) and the engine's limits on source
// images (§3.8).
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace k3::vision {

/// Where the transparency fill runs (`transparent_bg_fill_stage`, spec §3.1): K3 ships after_resize
/// (the resize sees the native mode, alpha included); before_resize converts to RGB first.
enum class FillStage { kAfterResize, kBeforeResize };

/// Which Pillow the reference pixels come from; the released processor runs on whatever Pillow is
/// installed, and two of its behaviours changed in Pillow 13.0 (spec §3 corrections 1, and palette
/// lookups): kPillow12 (Pillow <= 12.x, Debian's 9.4 included): BICUBIC runs the horizontal pass
/// first; palette indices past the file's PLTE read gray (i, i, i). kPillow13: the vertical pass
/// runs first when (H0 - H1) > 0 and (H0 - H1) > 2 (W0 - W1); those indices read black.
/// An engine option, not a preprocessor_config.json key.
enum class PillowCompat { kPillow12, kPillow13 };

/// The preprocessing values, defaults = K3's shipped preprocessor_config.json (spec §1.2).
struct ImagePreprocessConfig {
  int64_t patch_size = 14;                             ///< pixels per patch side; must be 14 (kPatchSize)
  int64_t merge_kernel_size = 2;                       ///< the tower's 2x2 merge: the grid is padded to multiples
  int64_t in_patch_limit = 65536;                      ///< patch budget per image (spec §3.2 L)
  int64_t patch_limit_on_one_side = 512;               ///< patches per side at most (spec §3.2 S)
  std::array<double, 3> image_mean = {0.5, 0.5, 0.5};  ///< per channel R, G, B
  std::array<double, 3> image_std = {0.5, 0.5, 0.5};   ///< per channel R, G, B, > 0
  int64_t chessboard_square_size = 8;                  ///< pixels per chessboard square (of the resized image)
  bool chessboard_square_on_top_left = true;           ///< true: square (0,0) is white
  int chessboard_white_value = 255;                    ///< 0..255
  int chessboard_gray_value = 180;                     ///< 0..255
  FillStage fill_stage = FillStage::kAfterResize;
  PillowCompat pillow = PillowCompat::kPillow12;  ///< engine option (see PillowCompat), not a JSON key

  /// Reads the keys above from a preprocessor_config.json text: from its `media_proc_cfg` object
  /// when it has one, else from the top level. Missing keys keep K3's values; other keys are
  /// ignored (video keys, `config_type`, `auto_map`). Errors (k3::Error naming `source` and the
  /// key, what was expected and found): not JSON, a key of the wrong type or out of range,
  /// `patch_size` other than 14, `fixed_output_tokens` not null, a `transparent_bg_config.pattern`
  /// other than "chessboard", an unknown `transparent_bg_fill_stage`.
  static ImagePreprocessConfig parse(std::string_view json_text, const std::string& source);
  /// parse() of a file (read bounded to 1 MiB).
  static ImagePreprocessConfig load(const std::filesystem::path& file);
  /// The configuration of a checkpoint folder: load(dir / "preprocessor_config.json") when the
  /// file exists, else K3's shipped values (a text-only checkpoint has no such file).
  static ImagePreprocessConfig for_model_dir(const std::filesystem::path& dir);
};

/// Limits on one source image, checked before its pixel data is decoded (spec §3.8; defaults of
/// rtp-llm): a decompression bomb is refused from its header.
struct ImageLimits {
  uint64_t max_bytes = 32ull << 20;             ///< compressed bytes: 32 MiB
  uint64_t max_source_pixels = 7168ull * 7168;  ///< decoded W0*H0: (512*14)^2 = 51,380,224
};

}  // namespace k3::vision
