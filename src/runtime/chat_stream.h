// Streaming view of K3 assistant output (spec §5.2 "Strip the markup when streaming"): turns
// generated ids into UTF-8 text pieces tagged with their channel (reasoning or content), with
// the <|open|>TAG…<|sep|> / <|close|>TAG<|sep|> markup removed. Tool blocks and unknown tags
// are hidden; other specials ([BOS], <|end_of_msg|>, …) are dropped. The final parse of a
// whole answer (for the conversation history) is parse_k3_output (tokenizer/chat_output.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace k3 {

enum class ChatChannel { Reasoning, Content, Hidden };

struct ChatPiece {
  ChatChannel channel;
  std::string text;  ///< valid UTF-8
};

class ChatStream {
 public:
  /// prompt_opened_think: the prompt ended with <|open|>think<|sep|> (thinking on), so text
  /// before any marker is reasoning; otherwise it is content. The tokenizer must outlive this.
  ChatStream(const Tokenizer& tok, bool prompt_opened_think);

  /// Adds one generated id; returns the text it completes (zero or more pieces).
  /// Errors: k3::Error for an id outside the vocabulary.
  std::vector<ChatPiece> push(int32_t id);
  /// Ends the answer: returns the held-back bytes (an incomplete character becomes U+FFFD).
  std::vector<ChatPiece> flush();

 private:
  enum class Mode { Text, OpenTag, CloseTag };
  void emit(std::vector<ChatPiece>& out, std::string text) const;
  void flush_into(std::vector<ChatPiece>& out);

  const Tokenizer* tok_;
  StreamDecoder dec_;
  Mode mode_ = Mode::Text;
  ChatChannel channel_;
  std::string tag_;  ///< bytes of the tag being read
};

}  // namespace k3
