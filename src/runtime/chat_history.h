// Keeping a chat inside its context (llama.cpp's context shift, done at turn boundaries so the
// K3 chat format stays valid): when the rendered conversation plus room for the answer no
// longer fits in n_ctx, the oldest turns are dropped — a turn is one user message and every
// message after it up to the next user message — while a leading system message and the newest
// user message are always kept.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "tokenizer/chat_k3.h"
#include "tokenizer/tokenizer.h"

namespace k3 {

struct ChatFit {
  std::vector<int32_t> prompt;  ///< the rendered conversation after dropping (empty when !fits)
  int dropped_turns = 0;        ///< turns removed from `messages`
  int64_t dropped_tokens = 0;   ///< rendered tokens those turns took
  bool fits = false;            ///< false: even system + the newest message take >= n_ctx tokens
  std::vector<MediaSpan> media;  ///< the prompt's image pad runs (image = index in the kept images)
  int dropped_images = 0;        ///< images of the dropped turns: the first ones of opt.images
};

/// Renders `messages` (whose last element is the newest user message) and drops the oldest
/// turns from it while the prompt plus `reserve` answer tokens exceed n_ctx and an older turn
/// remains. fits = prompt.size() < n_ctx (at least one token of room). When !fits, `messages`
/// is left with only the kept system message and the newest message, and the caller should
/// refuse the message (and pop it). reserve is clamped to [1, n_ctx / 2]. Images: opt.images are
/// the conversation's images in order (one per image part of its user messages); a dropped turn
/// drops its images too (dropped_images, the first ones), and media indexes the kept ones.
ChatFit fit_chat_to_context(const Tokenizer& tok, nlohmann::ordered_json& messages, const ChatOptions& opt,
                            int64_t n_ctx, int64_t reserve);

}  // namespace k3
