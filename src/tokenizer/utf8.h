// UTF-8 helpers for the tokenizer: validation by "maximal subpart" (the rule Python's
// bytes.decode('utf-8', errors='replace') and the Unicode standard recommend), replacement of
// invalid sequences with U+FFFD, and Python's str.isspace() (used by Kimi's input chunking,
// spec tokenizer.md §6 item 10).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace k3::tok {

/// Result of looking at the bytes starting at one position of a UTF-8 buffer.
struct Utf8Step {
  enum Kind { kChar, kInvalid, kIncomplete } kind;
  std::size_t len;   ///< bytes consumed: the character, or the maximal invalid subpart
  std::uint32_t cp;  ///< code point when kind == kChar
};

/// Classifies the bytes at s[pos..]. kIncomplete means the tail is a valid but truncated
/// prefix of a character (only possible at the end of s); `len` is then the tail length.
/// Requires pos < s.size().
Utf8Step utf8_step(std::string_view s, std::size_t pos);

/// True when s is entirely valid UTF-8 (no surrogates, no overlongs, <= U+10FFFF).
bool utf8_valid(std::string_view s);

/// Returns s with every maximal invalid subpart (and a truncated tail) replaced by U+FFFD
/// (EF BF BD): byte-for-byte the same as Python's s.decode('utf-8', 'replace').encode().
std::string utf8_sanitize(std::string_view s);

/// Appends the UTF-8 encoding of code point cp (must be a valid scalar value) to out.
void utf8_append(std::string& out, std::uint32_t cp);

/// Python's str.isspace() for one code point (bidi WS/B/S or category Zs): \t..\r,
/// U+001C..U+001F, space, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F,
/// U+205F, U+3000.
bool py_isspace(std::uint32_t cp);

}  // namespace k3::tok
