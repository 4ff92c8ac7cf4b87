// OpenAI `image_url` content parts of a chat request, translated for the engine: the HTTP layer
// only decodes each part's `data:` URL into bytes (base64 by OpenSSL's EVP_DecodeBlock) and
// checks the byte limit; preprocessing and the vision tower run below, in the runtime
// (runtime/image_prompt.h image_prompt_from_bytes). Remote URLs are refused (k3 serve fetches
// nothing on behalf of a client).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/image_prompt.h"

namespace k3::server {

/// Limits on a request's images (k3 serve --max-image-bytes, --max-images).
struct ImagePartLimits {
  uint64_t max_bytes = 20ull << 20;  ///< decoded bytes of one image (more: 413)
  int64_t max_images = 16;           ///< images in one request (more: 413)
};

/// The bytes of a `data:` URL: "data:<media type>[;<param>]*;base64,<base64>". The media type
/// must be image/png, image/jpeg (image/jpg) or image/webp; the payload strict base64 (RFC 4648
/// alphabet, length a multiple of 4, '=' only as the last one or two characters). Errors
/// (ApiError 400 with param "messages", naming `where`): another scheme (remote URLs: "not
/// fetched"), no ";base64", another media type, bad base64; ApiError 413 when the decoded size
/// would exceed `max_bytes` (checked from the base64 length before decoding).
std::string decode_image_data_url(std::string_view url, const std::string& where, uint64_t max_bytes);

/// Takes the images out of a checked messages list (openai_request.h check_messages): each
/// content part of type "image_url" ({"image_url": {"url": ...}} or {"image_url": "..."}) in a
/// user message is decoded (decode_image_data_url) and replaced by {"type": "image_url"} (the
/// chat renderer's slot), in order. Errors (ApiError naming messages[i].content[k]): a part
/// without a URL, an image part outside a user message, over max_images (413), and
/// decode_image_data_url's.
std::vector<ImageBytes> take_request_images(nlohmann::ordered_json& messages, const ImagePartLimits& limits);

}  // namespace k3::server
