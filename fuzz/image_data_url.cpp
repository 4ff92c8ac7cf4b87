// libFuzzer: the data: URL and base64 parsing of `k3 serve`'s image_url parts
// (tools/server/image_parts.h; the base64 itself is OpenSSL's EVP_DecodeBlock). Any bytes are a
// URL (the first byte picks the byte limit); an accepted URL's bytes stay within the limit and
// have the size its payload encodes, and the same URL inside a messages list goes through
// take_request_images. Only the server's ApiError (400/413 naming the part) may escape.
#include <cstddef>
#include <cstdint>
#include <string>

#include "api_error.h"
#include "image_parts.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint64_t limit = uint64_t{data[0]} * 64;
  const std::string url(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const std::string bytes = k3::server::decode_image_data_url(url, "messages[0].content[0]", limit);
    if (bytes.size() > limit) __builtin_trap();
    // the decoded size follows from the payload's length and padding (3 bytes per 4 characters)
    const std::string payload = url.substr(url.find(',') + 1);
    const size_t pad = payload.size() >= 2 && payload[payload.size() - 2] == '=' ? 2 : payload.back() == '=' ? 1 : 0;
    if (bytes.size() != payload.size() / 4 * 3 - pad) __builtin_trap();
  } catch (const k3::server::ApiError&) {
  }
  try {
    nlohmann::ordered_json msgs = nlohmann::ordered_json::array(
        {{{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", {{"url", url}}}}}}}});
    k3::server::ImagePartLimits lim;
    lim.max_bytes = limit;
    (void)k3::server::take_request_images(msgs, lim);
  } catch (const k3::server::ApiError&) {
  } catch (const nlohmann::ordered_json::exception&) {  // invalid UTF-8 in a JSON string is never dumped here
  }
  return 0;
}
