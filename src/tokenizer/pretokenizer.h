// The Kimi pre-tokenizer (`pat_str`, spec tokenizer.md §2.1) on PCRE2.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string_view>

namespace k3::tok {

/// Splits valid UTF-8 text into the pieces of Kimi's 8-alternative pattern, exactly as
/// tiktoken (fancy-regex) does. The `&&[^\p{Han}]` class intersections are rewritten with
/// complement classes over the general categories, `\p{Han}` is spelled Script=Han
/// (`\p{sc:Han}`, not Script_Extensions), and `\s` is the Unicode White_Space set (which PCRE2's
/// \s lacks U+0085 from). Unicode data is PCRE2's (10.42: Unicode 14). Thread-safe: each call
/// uses its own match data. Errors: k3::Error if PCRE2 fails (compile, match limit).
class PreTokenizer {
 public:
  PreTokenizer();
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  /// Calls on_piece(begin, length) for every piece of `text` (which must be valid UTF-8;
  /// not re-checked), in order; the pieces tile the text.
  void split(std::string_view text, const std::function<void(std::size_t, std::size_t)>& on_piece) const;

  /// The PCRE2 pattern source used (for tests and debugging).
  static const char* pattern();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace k3::tok
