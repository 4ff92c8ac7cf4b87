#include "runtime/chat_history.h"

#include <algorithm>

namespace k3 {

namespace {

/// Image parts ("image_url" / "image") in messages [a, b) (the chat renderer's image slots).
int count_image_parts(const nlohmann::ordered_json& messages, std::size_t a, std::size_t b) {
  int n = 0;
  for (std::size_t i = a; i < b; ++i) {
    const auto c = messages[i].find("content");
    if (c == messages[i].end() || !c->is_array()) continue;
    for (const auto& p : *c)
      if (p.is_object() && p.contains("type") && (p["type"] == "image_url" || p["type"] == "image")) ++n;
  }
  return n;
}

}  // namespace

ChatFit fit_chat_to_context(const Tokenizer& tok, nlohmann::ordered_json& messages, const ChatOptions& opt_in,
                            int64_t n_ctx, int64_t reserve) {
  reserve = std::clamp<int64_t>(reserve, 1, std::max<int64_t>(1, n_ctx / 2));
  ChatFit r;
  ChatOptions opt = opt_in;  // its images lose those of dropped turns
  auto render = [&] {
    ChatIds c = encode_chat_with_media(tok, build_chat_segments(messages, opt));
    r.media = std::move(c.media);
    return std::move(c.ids);
  };
  r.prompt = render();
  const std::size_t first = !messages.empty() && messages[0].value("role", "") == "system" ? 1 : 0;
  const int64_t before = static_cast<int64_t>(r.prompt.size());
  while (static_cast<int64_t>(r.prompt.size()) + reserve > n_ctx) {
    // the oldest turn: messages[first] up to (not including) the next user message
    if (messages.size() <= first + 1) break;  // only the newest message is left
    std::size_t end = first + 1;
    while (end < messages.size() - 1 && messages[end].value("role", "") != "user") ++end;
    if (end > messages.size() - 1) end = messages.size() - 1;
    const int images = count_image_parts(messages, first, end);
    opt.images.erase(opt.images.begin(),
                     opt.images.begin() + std::min<std::ptrdiff_t>(images, static_cast<std::ptrdiff_t>(opt.images.size())));
    r.dropped_images += images;
    messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(first),
                   messages.begin() + static_cast<std::ptrdiff_t>(end));
    ++r.dropped_turns;
    r.prompt = render();
  }
  r.dropped_tokens = before - static_cast<int64_t>(r.prompt.size());
  r.fits = static_cast<int64_t>(r.prompt.size()) < n_ctx;
  if (!r.fits) {
    r.prompt.clear();
    r.media.clear();
  }
  return r;
}

}  // namespace k3
