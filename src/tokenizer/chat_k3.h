// The K3 chat format ("XTML", encoding_k3.py's build_chat_segments + tokenization_kimi.py's
// apply_chat_template; spec tokenizer.md §4, k3-architecture.md §5.2).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace k3 {

/// One image of a conversation as the chat format needs it (shared/spec/vision.md §6.1): its
/// original size in pixels (before any resize) and its image-token count after the 2x2 merge.
struct ChatImage {
  int64_t width = 0;
  int64_t height = 0;
  int64_t n_tokens = 0;  ///< <|media_pad|> positions of its media block (>= 1)
};

/// apply_chat_template keyword arguments.
struct ChatOptions {
  bool thinking = true;                                ///< `thinking` / `enable_thinking`
  std::optional<std::string> thinking_effort = "max";  ///< low/high/max; nullopt = no message
  bool add_generation_prompt = true;
  nlohmann::ordered_json tools;            ///< OpenAI tools list, or null
  nlohmann::ordered_json tool_choice;      ///< "auto"/"required"/"none" or null
  nlohmann::ordered_json response_format;  ///< {"type": "json_object"|"text"} or null
  /// The images of the conversation in order: the k-th content part of type "image_url" or
  /// "image" in a user message becomes the media block of images[k]. Not a kwarg.
  std::vector<ChatImage> images;

  /// From an HF-style kwargs object: thinking, enable_thinking, thinking_effort (string or
  /// null), add_generation_prompt, tools, tool_choice, response_format. Unknown keys are
  /// rejected. Errors: k3::Error naming the key, expected vs found.
  static ChatOptions from_kwargs(const nlohmann::ordered_json& kwargs);
};

/// One rendered segment: control segments are the four markers, encoded with specials
/// allowed; text segments are encoded with specials disallowed. Each is BPE'd separately.
struct ChatSegment {
  std::string text;
  bool control;
  /// A media block (control): the index of its image in ChatOptions::images, else -1. Its text
  /// holds one <|media_pad|> (the HF convention); encoding writes n_pads of them (vLLM's).
  int64_t image = -1;
  int64_t n_pads = 0;
};

/// Where an image's embeddings go: ids [pos, pos + n) are its <|media_pad|> run.
struct MediaSpan {
  int64_t pos = 0;
  int64_t n = 0;
  int64_t image = 0;  ///< index in ChatOptions::images
};

/// Encoded chat: the ids and the media-pad run of each image, in image order.
struct ChatIds {
  std::vector<int32_t> ids;
  std::vector<MediaSpan> media;
};

/// Renders OpenAI-style messages (role/content/name/reasoning_content/tool_calls/
/// tool_call_id) into segments, in the reference's order: tool declaration, thinking effort,
/// messages, tool-choice note, response-format note, generation prompt. No [BOS].
/// Unknown roles are skipped, as the reference does. Errors: k3::Error naming the message
/// index and key for malformed input and for features whose layout is not pinned here
/// (dynamic system `tools`, json_schema response formats, effort "medium"), and
/// for a tool call's "arguments" string nested deeper than kMaxJsonDepth (core/json_depth.h);
/// values (messages, tools) nested deeper than kMaxJsonDepth are refused by py_json_dumps.
std::vector<ChatSegment> build_chat_segments(const nlohmann::ordered_json& messages, const ChatOptions& opt);

/// The ids: each segment encoded separately and concatenated (control: specials allowed); a
/// media block's one <|media_pad|> becomes n_pads of them.
std::vector<int32_t> encode_chat_segments(const Tokenizer& tok, const std::vector<ChatSegment>& segs);

/// encode_chat_segments plus the media-pad run of each image. Errors: k3::Error when the
/// tokenizer lacks <|media_pad|> and an image is present.
ChatIds encode_chat_with_media(const Tokenizer& tok, const std::vector<ChatSegment>& segs);

/// tokenize=False text: the segments joined.
std::string join_chat_segments(const std::vector<ChatSegment>& segs);

/// The media block of one image (spec vision.md §6.1), with one <|media_pad|>:
/// "<|media_begin|>image {W}x{H}<|media_content|><|media_pad|><|media_end|>".
std::string media_block_text(const ChatImage& image);

/// Shorthand: build + encode.
std::vector<int32_t> render_chat(const Tokenizer& tok, const nlohmann::ordered_json& messages,
                                 const ChatOptions& opt = {});

}  // namespace k3
