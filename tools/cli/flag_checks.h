// Shared flag validation of the k3 subcommands: one range-error message for every numeric flag
// ("-c/--ctx-size: expected an integer >= 1, found '0'"), instead of CLI11's checks, which print
// the bounds of double (309 digits) for PositiveNumber / NonNegativeNumber; and the input-size
// bound of files read into memory (--max-input-mib).
#pragma once
#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdio>
#include <cstdint>
#include <limits>
#include <string>

#include "core/read_file.h"

namespace k3cli {

/// Parses a whole decimal integer (optional '-'), false on anything else or overflow.
inline bool parse_int64(const std::string& s, int64_t& out) {
  const char* b = s.data();
  const char* e = s.data() + s.size();
  if (b != e && *b == '+') ++b;
  auto [p, ec] = std::from_chars(b, e, out);
  return ec == std::errc() && p == e && b != e;
}
inline bool parse_uint64(const std::string& s, uint64_t& out) {
  const char* b = s.data();
  const char* e = s.data() + s.size();
  if (b != e && *b == '+') ++b;
  if (b != e && *b == '-') return false;
  auto [p, ec] = std::from_chars(b, e, out);
  return ec == std::errc() && p == e && b != e;
}

/// A number as the user would write it: "-1", "0.5", "1e+07" (not std::to_string's "-1.000000").
inline std::string number_text(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

/// "expected an integer >= lo" / "in [lo, hi]" — the text of IntRange's errors and help.
inline std::string int_range_text(int64_t lo, int64_t hi) {
  if (hi == std::numeric_limits<int64_t>::max()) return "an integer >= " + std::to_string(lo);
  return "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

/// Validator: the value is a whole integer in [lo, hi]. CLI11 prefixes the option name, so the
/// error reads "--ctx-size: expected an integer >= 1, found '0'".
inline CLI::Validator IntRange(int64_t lo, int64_t hi = std::numeric_limits<int64_t>::max()) {
  const std::string text = int_range_text(lo, hi);
  return CLI::Validator(
      [lo, hi, text](std::string& v) -> std::string {
        int64_t x = 0;
        if (!parse_int64(v, x) || x < lo || x > hi) return "expected " + text + ", found '" + v + "'";
        return {};
      },
      hi == std::numeric_limits<int64_t>::max() ? ">= " + std::to_string(lo)
                                                : "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

/// --max-input-mib N: the bound of a file read into memory (-f, --ids-file), default 1024 MiB.
struct InputLimit {
  int64_t mib = static_cast<int64_t>(k3::kDefaultInputLimit >> 20);
  void add_to(CLI::App* sub) {
    sub->add_option("--max-input-mib", mib, "largest input file read into memory, in MiB")
        ->capture_default_str()
        ->check(IntRange(1, int64_t{1} << 40));
  }
  /// Limits for a user input file: pipes allowed, the flag named in the error.
  k3::ReadLimits limits() const {
    k3::ReadLimits l;
    l.max_bytes = static_cast<uint64_t>(mib) << 20;
    l.allow_pipe = true;
    l.limit_flag = "--max-input-mib";
    return l;
  }
};

}  // namespace k3cli

#include <cstdio>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace k3cli {

/// Byte offset of the first invalid UTF-8 sequence in s (a truncated tail counts), or npos.
inline std::size_t first_invalid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const k3::tok::Utf8Step st = k3::tok::utf8_step(s, i);
    if (st.kind != k3::tok::Utf8Step::kChar) return i;
    i += st.len;
  }
  return std::string_view::npos;
}

/// Invalid UTF-8 in a prompt: with `strict` a k3::Error naming `what` and the byte offset, else
/// one warning line on stderr (the tokenizer replaces invalid bytes by U+FFFD, as tiktoken's
/// Python str input would have to). `what` names the source, e.g. "-p/--prompt".
inline void check_utf8(std::string_view text, bool strict, const std::string& what) {
  const std::size_t at = first_invalid_utf8(text);
  if (at == std::string_view::npos) return;
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", static_cast<unsigned char>(text[at]));
  const std::string where = what + ": invalid UTF-8 at byte " + std::to_string(at) + " (" + hex + ")";
  if (strict) throw k3::Error(where + "; expected UTF-8 text (--strict-utf8)");
  std::fprintf(stderr, "k3: warning: %s; invalid bytes are encoded as U+FFFD (--strict-utf8 refuses them)\n",
               where.c_str());
}

}  // namespace k3cli
