// StreamDecoder: emit complete UTF-8 characters, hold an incomplete tail.
#include "tokenizer/stream_decoder.h"

#include "tokenizer/utf8.h"

namespace k3 {

std::string StreamDecoder::push(int32_t id) {
  const std::string_view bytes = tok_->token_bytes(id);  // throws before touching state
  if (skip_special_ && tok_->is_special(id) && tok_->specials()[static_cast<std::size_t>(id - tok_->n_ranks())].special)
    return {};
  pending_.append(bytes);
  std::string out;
  std::size_t i = 0;
  while (i < pending_.size()) {
    const tok::Utf8Step st = tok::utf8_step(pending_, i);
    if (st.kind == tok::Utf8Step::kIncomplete) break;
    if (st.kind == tok::Utf8Step::kChar) out.append(pending_, i, st.len);
    else out.append("\xEF\xBF\xBD");
    i += st.len;
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = pending_.empty() ? std::string() : tok::utf8_sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace k3
