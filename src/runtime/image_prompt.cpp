// Images into a prompt: chat media blocks + tower embeddings (runtime/image_prompt.h).
#include "runtime/image_prompt.h"

#include <algorithm>
#include <cstring>

#include <openssl/sha.h>

#include "core/error.h"
#include "vision/image_preprocess.h"

namespace k3 {

uint64_t image_digest(const vision::ImagePatches& image) {
  // SHA-256(grid_h, grid_w, SHA-256(patch bytes)): two one-shot SHA256() calls (the streaming
  // SHA256_Init/Update/Final interface is deprecated in OpenSSL 3).
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(image.patches.data()), image.patches.size() * sizeof(float), d);
  unsigned char msg[16 + SHA256_DIGEST_LENGTH];
  std::memcpy(msg, &image.grid_h, 8);
  std::memcpy(msg + 8, &image.grid_w, 8);
  std::memcpy(msg + 16, d, SHA256_DIGEST_LENGTH);
  SHA256(msg, sizeof msg, d);
  uint64_t r = 0;
  std::memcpy(&r, d, sizeof r);
  return r;
}

ChatImage chat_image(const vision::ImagePatches& image) {
  return {image.width, image.height, image.n_tokens()};
}

std::vector<EmbedRows> embeds_in_range(std::span<const EmbedRows> embeds, int64_t pos, int64_t n, int64_t hidden) {
  std::vector<EmbedRows> r;
  for (const EmbedRows& e : embeds) {
    const int64_t a = std::max(pos, e.pos), b = std::min(pos + n, e.pos + e.n);
    if (a >= b) continue;
    r.push_back({a - pos, b - a, e.rows.subspan(static_cast<size_t>((a - e.pos) * hidden), static_cast<size_t>((b - a) * hidden))});
  }
  return r;
}

std::vector<EmbedRows> ImagePrompt::embeds(int64_t pos, int64_t n) const {
  std::vector<EmbedRows> all;
  for (const MediaSpan& m : media)
    all.push_back({m.pos, m.n, std::span<const float>(rows[static_cast<size_t>(m.image)])});
  return embeds_in_range(all, pos, n, hidden);
}

std::vector<MediaKey> ImagePrompt::media_keys() const {
  std::vector<MediaKey> r;
  for (const MediaSpan& m : media) r.push_back({m.pos, m.n, digests[static_cast<size_t>(m.image)]});
  return r;
}

int64_t ImagePrompt::n_image_tokens() const {
  int64_t n = 0;
  for (const MediaSpan& m : media) n += m.n;
  return n;
}

void refuse_image_without_tower(const std::string& what) {
  throw Error(what + ": this checkpoint has no vision tower (no vision_config in config.json and no vision "
                     "tensors), so it cannot take images; send text only or use a checkpoint with a tower");
}

ImagePrompt build_image_prompt(const Tokenizer& tok, const vision::VisionTower* tower, int64_t model_hidden,
                               const nlohmann::ordered_json& messages, ChatOptions opt,
                               std::span<const vision::ImagePatches> images, bool encode) {
  if (!images.empty() && tower == nullptr) refuse_image_without_tower("image prompt");
  opt.images.clear();
  for (const auto& im : images) opt.images.push_back(chat_image(im));
  ImagePrompt p;
  ChatIds c = encode_chat_with_media(tok, build_chat_segments(messages, opt));
  p.ids = std::move(c.ids);
  p.media = std::move(c.media);
  p.hidden = model_hidden;
  if (images.empty() || !encode) return p;
  const int64_t Dt = tower->config().text_hidden_size;
  if (Dt != model_hidden)
    throw Error("image prompt: the vision projector writes " + std::to_string(Dt) +
                "-wide rows but the text model's hidden_size is " + std::to_string(model_hidden));
  vision::VisionOutput out = tower->encode(images);
  size_t off = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    const int64_t n = out.n_tokens[i];
    if (n != images[i].n_tokens())
      throw Error("image prompt: image " + images[i].name + ": the tower gave " + std::to_string(n) + " tokens, expected " +
                  std::to_string(images[i].n_tokens()));
    p.rows.emplace_back(out.embeddings.begin() + static_cast<std::ptrdiff_t>(off),
                        out.embeddings.begin() + static_cast<std::ptrdiff_t>(off + static_cast<size_t>(n * Dt)));
    off += static_cast<size_t>(n * Dt);
    p.digests.push_back(image_digest(images[i]));
  }
  return p;
}

ImagePrompt image_prompt_from_bytes(const Tokenizer& tok, const vision::VisionTower* tower, int64_t model_hidden,
                                    const nlohmann::ordered_json& messages, const ChatOptions& opt,
                                    std::span<const ImageBytes> images, const vision::ImagePreprocessConfig& cfg,
                                    const vision::ImageLimits& limits, bool encode) {
  if (!images.empty() && tower == nullptr) refuse_image_without_tower(images[0].name);
  std::vector<vision::ImagePatches> patches;
  patches.reserve(images.size());
  for (const ImageBytes& im : images)
    patches.push_back(vision::preprocess_image(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(im.bytes.data()), im.bytes.size()), im.name, cfg,
        limits));
  return build_image_prompt(tok, tower, model_hidden, messages, opt, patches, encode);
}

}  // namespace k3
