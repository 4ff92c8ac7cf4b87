// Incremental detokenizer (spec tokenizer.md §6 item 6): tokens may end mid-character, so
// bytes are held back until they form complete UTF-8 characters.
#pragma once
#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace k3 {

/// Turns a stream of ids into valid UTF-8 text pieces. The concatenation of every push()
/// result and the final flush() equals utf8_sanitize(tokenizer.decode(all ids)), i.e. Python's
/// bytes.decode('utf-8', 'replace'): invalid bytes become U+FFFD as soon as they are known
/// to be invalid, an incomplete character is held until completed or flushed.
/// The tokenizer must outlive the decoder. Not thread-safe (one per sequence).
class StreamDecoder {
 public:
  /// skip_special: drop specials flagged special=true (as Tokenizer::decode).
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tok_(&tokenizer), skip_special_(skip_special) {}

  /// Adds one id; returns the newly completed text (possibly empty).
  /// Errors: k3::Error for an id outside [0, vocab_size) (the decoder state is unchanged).
  std::string push(int32_t id);
  /// Ends the stream: returns the held bytes (an incomplete character becomes U+FFFD) and
  /// resets the decoder for reuse.
  std::string flush();
  /// Number of bytes currently held back (0..3).
  std::size_t pending() const { return pending_.size(); }

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace k3
