// Images into a prompt (shared/spec/vision.md §6): the chat format's media blocks (one
// <|media_pad|> id per image token, tokenizer/chat_k3.h), the vision tower's embeddings for those
// positions (vision/vision_tower.h), their EmbedRows for Model::forward (model/k3_model.h) and
// their MediaKeys for the prefix cache (runtime/prefix_cache.h).
//
//   bytes -> vision::preprocess_image -> ImagePatches -> VisionTower::encode -> [N_i, D] rows
//   messages + ChatImage{W0, H0, N_i} -> ids with N_i pads per image + MediaSpan{pos, N_i}
//   forward: embed[id] for text positions, rows of image i at its span
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/k3_model.h"
#include "runtime/prefix_cache.h"
#include "tokenizer/chat_k3.h"
#include "vision/image_config.h"
#include "vision/image_patches.h"
#include "vision/vision_tower.h"

namespace k3 {

/// The digest that keys an image's content: the first 8 bytes (little-endian) of
/// SHA-256(grid_h, grid_w as int64 ++ SHA-256(the float32 patch values)) — the tower's whole
/// input, so two images the tower sees differently never share a digest (up to SHA-256
/// truncated to 64 bits).
uint64_t image_digest(const vision::ImagePatches& image);

/// The chat format's view of an image: original size and token count.
ChatImage chat_image(const vision::ImagePatches& image);

/// A tokenized prompt with its images' embeddings. Move-only (embeds() views into rows).
struct ImagePrompt {
  std::vector<int32_t> ids;               ///< with N_i <|media_pad|> ids per image
  std::vector<MediaSpan> media;           ///< each image's pad run in ids, image order
  std::vector<std::vector<float>> rows;   ///< per image: float32 [N_i, hidden_size]
  std::vector<uint64_t> digests;          ///< per image: image_digest
  int64_t hidden = 0;                     ///< hidden_size of the rows

  /// The embedding overrides of ids [pos, pos + n), positions relative to pos (Model::forward).
  std::vector<EmbedRows> embeds(int64_t pos, int64_t n) const;
  /// All of them (positions relative to ids[0]).
  std::vector<EmbedRows> embeds() const { return embeds(0, static_cast<int64_t>(ids.size())); }
  /// The prefix cache's keys of the images.
  std::vector<MediaKey> media_keys() const;
  /// Image tokens in the prompt (sum of N_i).
  int64_t n_image_tokens() const;
};

/// Renders `messages` (OpenAI style, image parts of type "image_url"/"image" in user turns,
/// consumed in order by `images`) with the K3 chat format and encodes the images with `tower`
/// in one batch. `tower` may be null only when `images` is empty. Errors (k3::Error): a null
/// tower with images ("the checkpoint has no vision tower..."), the tower's hidden size differing
/// from `model_hidden`, the chat format's errors (image part count vs images), the tower's.
/// `encode` false: the ids and spans only (rows and digests left empty; /tokenize).
ImagePrompt build_image_prompt(const Tokenizer& tok, const vision::VisionTower* tower, int64_t model_hidden,
                               const nlohmann::ordered_json& messages, ChatOptions opt,
                               std::span<const vision::ImagePatches> images, bool encode = true);

/// An image as a request sends it: its encoded bytes (PNG, JPEG or WebP) and the name its errors
/// carry (e.g. "messages[0].content[1]").
struct ImageBytes {
  std::string bytes;
  std::string name;
};

/// The engine side of a request's images (what `k3 serve` runs below the HTTP layer): each
/// image preprocessed (vision/image_preprocess.h with `cfg` and `limits`), then
/// build_image_prompt. Errors (k3::Error naming the image): the refusal of a null tower, the
/// decoder's (format, limits, corrupt data), build_image_prompt's.
ImagePrompt image_prompt_from_bytes(const Tokenizer& tok, const vision::VisionTower* tower, int64_t model_hidden,
                                    const nlohmann::ordered_json& messages, const ChatOptions& opt,
                                    std::span<const ImageBytes> images, const vision::ImagePreprocessConfig& cfg,
                                    const vision::ImageLimits& limits, bool encode = true);

/// Clips `embeds` (positions relative to some origin) to [pos, pos + n) and rebases them to pos.
std::vector<EmbedRows> embeds_in_range(std::span<const EmbedRows> embeds, int64_t pos, int64_t n, int64_t hidden);

/// The error for an image sent to a checkpoint without a vision tower (names `what`).
[[noreturn]] void refuse_image_without_tower(const std::string& what);

}  // namespace k3
