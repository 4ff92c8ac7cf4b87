// ChatStream: a small state machine over the four XTML control ids.
#include "runtime/chat_stream.h"

#include "core/error.h"

namespace k3 {

ChatStream::ChatStream(const Tokenizer& tok, bool prompt_opened_think)
    : tok_(&tok),
      dec_(tok, /*skip_special=*/true),
      channel_(prompt_opened_think ? ChatChannel::Reasoning : ChatChannel::Content) {}

void ChatStream::emit(std::vector<ChatPiece>& out, std::string text) const {
  if (text.empty() || channel_ == ChatChannel::Hidden) return;
  if (!out.empty() && out.back().channel == channel_) out.back().text += text;
  else out.push_back({channel_, std::move(text)});
}

void ChatStream::flush_into(std::vector<ChatPiece>& out) { emit(out, dec_.flush()); }

std::vector<ChatPiece> ChatStream::push(int32_t id) {
  if (id < 0 || id >= tok_->vocab_size())
    throw Error("chat output: token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                std::to_string(tok_->vocab_size()) + ")");
  std::vector<ChatPiece> out;
  if (id == tok_->open_id() || id == tok_->close_id()) {
    flush_into(out);
    mode_ = id == tok_->open_id() ? Mode::OpenTag : Mode::CloseTag;
    tag_.clear();
    return out;
  }
  if (id == tok_->sep_id()) {
    if (mode_ == Mode::Text) return out;  // stray separator: markup, not text
    // The tag name is the first word ("think", "response", "call tool=...").
    const std::string name = tag_.substr(0, tag_.find_first_of(" \t\n"));
    if (mode_ == Mode::OpenTag)
      channel_ = name == "think"      ? ChatChannel::Reasoning
                 : name == "response" ? ChatChannel::Content
                                      : ChatChannel::Hidden;
    else channel_ = ChatChannel::Hidden;  // between blocks (after </think>, </response>, in tools)
    mode_ = Mode::Text;
    return out;
  }
  if (mode_ != Mode::Text) {
    if (!tok_->is_special(id)) tag_ += tok_->token_bytes(id);
    return out;
  }
  emit(out, dec_.push(id));
  return out;
}

std::vector<ChatPiece> ChatStream::flush() {
  std::vector<ChatPiece> out;
  flush_into(out);
  return out;
}

}  // namespace k3
