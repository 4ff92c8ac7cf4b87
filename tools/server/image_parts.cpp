// image_url content parts -> image bytes (image_parts.h).
#include "image_parts.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cctype>

#include "api_error.h"

namespace k3::server {
namespace {

std::string lower(std::string_view s) {
  std::string o(s);
  std::transform(o.begin(), o.end(), o.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return o;
}

bool is_b64(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/';
}

}  // namespace

std::string decode_image_data_url(std::string_view url, const std::string& where, uint64_t max_bytes) {
  const std::string head = lower(url.substr(0, std::min<size_t>(url.size(), 16)));
  if (head.rfind("data:", 0) != 0) {
    const size_t colon = url.find(':');
    const std::string scheme = colon == std::string_view::npos || colon > 16 ? "" : lower(url.substr(0, colon));
    throw bad_request("messages",
                      where + ".image_url.url: " +
                          (scheme.empty() ? std::string("not a URL") : "a " + scheme + ": URL") +
                          "; k3 serve does not fetch images on behalf of a client: send the image inline as a "
                          "data: URL (data:image/png;base64,...; PNG, JPEG or WebP)");
  }
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos)
    throw bad_request("messages", where + ".image_url.url: a data: URL without ',' before its data");
  const std::string meta = lower(url.substr(5, comma - 5));  // "<type>[;param]*;base64"
  const size_t semi = meta.find(';');
  const std::string type = meta.substr(0, semi);
  if (meta.size() < 7 || meta.compare(meta.size() - 7, 7, ";base64") != 0)
    throw bad_request("messages", where + ".image_url.url: the data: URL must be base64 (data:" + type +
                                      ";base64,...); found \"data:" + meta + ",\"");
  if (type != "image/png" && type != "image/jpeg" && type != "image/jpg" && type != "image/webp")
    throw bad_request("messages", where + ".image_url.url: media type \"" + type +
                                      "\" is not supported (image/png, image/jpeg or image/webp)");
  const std::string_view b64 = url.substr(comma + 1);
  // Decoded size from the length, before decoding anything.
  const uint64_t decoded_max = b64.size() / 4 * 3;
  size_t pad = 0;
  if (!b64.empty() && b64.back() == '=') pad = b64.size() >= 2 && b64[b64.size() - 2] == '=' ? 2 : 1;
  if (decoded_max - std::min<uint64_t>(pad, decoded_max) > max_bytes)
    throw ApiError(413,
                   where + ": the image is " + std::to_string(decoded_max - pad) +
                       " bytes, over the limit of " + std::to_string(max_bytes) + " bytes per image (--max-image-bytes)",
                   "messages");
  if (b64.empty()) throw bad_request("messages", where + ".image_url.url: the data: URL holds no data");
  if (b64.size() % 4 != 0)
    throw bad_request("messages", where + ".image_url.url: invalid base64 (" + std::to_string(b64.size()) +
                                      " characters, not a multiple of 4)");
  for (size_t i = 0; i < b64.size() - pad; ++i)
    if (!is_b64(b64[i]))
      throw bad_request("messages", where + ".image_url.url: invalid base64 (character " + std::to_string(i) +
                                        " of the data is not in the base64 alphabet)");
  std::string out(decoded_max, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(b64.data()), static_cast<int>(b64.size()));
  if (n < 0 || static_cast<uint64_t>(n) != decoded_max)
    throw bad_request("messages", where + ".image_url.url: invalid base64");
  out.resize(decoded_max - pad);
  return out;
}

std::vector<ImageBytes> take_request_images(nlohmann::ordered_json& messages, const ImagePartLimits& limits) {
  std::vector<ImageBytes> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    nlohmann::ordered_json& msg = messages[i];
    auto c = msg.find("content");
    if (c == msg.end() || !c->is_array()) continue;
    const std::string role = msg.value("role", "");
    for (size_t k = 0; k < c->size(); ++k) {
      nlohmann::ordered_json& part = (*c)[k];
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) continue;
      const std::string type = part["type"];
      if (type != "image_url" && type != "image") continue;
      const std::string where = "messages[" + std::to_string(i) + "].content[" + std::to_string(k) + "]";
      if (role != "user")
        throw bad_request("messages", where + ": an image part is only allowed in a user message");
      if (type == "image")
        throw bad_request("messages", where + ": content part type \"image\" is not OpenAI's; send "
                                              "{\"type\": \"image_url\", \"image_url\": {\"url\": \"data:...\"}}");
      const nlohmann::ordered_json* u = nullptr;
      if (auto iu = part.find("image_url"); iu != part.end()) {
        if (iu->is_string()) u = &*iu;
        else if (iu->is_object() && iu->contains("url")) u = &(*iu)["url"];
        if (iu->is_object())
          for (const auto& [key, v] : iu->items())
            if (key != "url" && key != "detail")
              throw bad_request("messages", where + ".image_url." + key + ": unknown key (url, detail)");
        if (iu->is_object() && iu->contains("detail")) {
          const auto& d = (*iu)["detail"];
          if (!d.is_string() || (d != "auto" && d != "low" && d != "high"))
            throw bad_request("messages", where + ".image_url.detail: expected \"auto\", \"low\" or \"high\"");
          if (d != "auto")
            throw bad_request("messages", where + ".image_url.detail: \"" + d.get<std::string>() +
                                              "\" is not supported: K3 sees every image at its own resolution "
                                              "(use \"auto\" or leave it out)");
        }
      }
      if (u == nullptr || !u->is_string())
        throw bad_request("messages", where + ".image_url.url: required (a data: URL string)");
      if (static_cast<int64_t>(out.size()) >= limits.max_images)
        throw ApiError(413,
                       where + ": more than " + std::to_string(limits.max_images) +
                           " images in one request (--max-images)",
                       "messages");
      out.push_back({decode_image_data_url(u->get_ref<const std::string&>(), where, limits.max_bytes), where});
      part = nlohmann::ordered_json{{"type", "image_url"}};
    }
  }
  return out;
}

}  // namespace k3::server
