#include "runtime/chat_history.h"

#include <algorithm>

namespace k3 {

ChatFit fit_chat_to_context(const Tokenizer& tok, nlohmann::ordered_json& messages, const ChatOptions& opt,
                            int64_t n_ctx, int64_t reserve) {
  reserve = std::clamp<int64_t>(reserve, 1, std::max<int64_t>(1, n_ctx / 2));
  ChatFit r;
  r.prompt = render_chat(tok, messages, opt);
  const std::size_t first = !messages.empty() && messages[0].value("role", "") == "system" ? 1 : 0;
  const int64_t before = static_cast<int64_t>(r.prompt.size());
  while (static_cast<int64_t>(r.prompt.size()) + reserve > n_ctx) {
    // the oldest turn: messages[first] up to (not including) the next user message
    if (messages.size() <= first + 1) break;  // only the newest message is left
    std::size_t end = first + 1;
    while (end < messages.size() - 1 && messages[end].value("role", "") != "user") ++end;
    if (end > messages.size() - 1) end = messages.size() - 1;
    messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(first),
                   messages.begin() + static_cast<std::ptrdiff_t>(end));
    ++r.dropped_turns;
    r.prompt = render_chat(tok, messages, opt);
  }
  r.dropped_tokens = before - static_cast<int64_t>(r.prompt.size());
  r.fits = static_cast<int64_t>(r.prompt.size()) < n_ctx;
  if (!r.fits) r.prompt.clear();
  return r;
}

}  // namespace k3
