// Kimi pat_str translated for PCRE2 10.42 (no class intersection, bare script = scx).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer.h"

#include <pcre2.h>

#include <string>

#include "core/error.h"

namespace k3::tok {
namespace {

// clang-format off
// White_Space (what Rust regex's \s means); PCRE2's UCP \s is Z + \t\n\v\f\r, without U+0085.
#define K3_WS "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
// [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]] = not (any other general category, or Han).
#define K3_UPPER "[^\\p{Ll}\\p{N}\\p{P}\\p{S}\\p{Z}\\p{C}\\p{sc:Han}]"
// [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]
#define K3_LOWER "[^\\p{Lu}\\p{Lt}\\p{N}\\p{P}\\p{S}\\p{Z}\\p{C}\\p{sc:Han}]"
#define K3_CONTR "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"

constexpr const char* kPattern =
    "\\p{sc:Han}+"
    "|[^\\r\\n\\p{L}\\p{N}]?" K3_UPPER "*" K3_LOWER "+" K3_CONTR
    "|[^\\r\\n\\p{L}\\p{N}]?" K3_UPPER "+" K3_LOWER "*" K3_CONTR
    "|\\p{N}{1,3}"
    "| ?[^" K3_WS "\\p{L}\\p{N}]+[\\r\\n]*"
    "|[" K3_WS "]*[\\r\\n]+"
    "|[" K3_WS "]+(?![^" K3_WS "])"
    "|[" K3_WS "]+";
// clang-format on

}  // namespace

struct PreTokenizer::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() {
    if (code) pcre2_code_free(code);
  }
};

const char* PreTokenizer::pattern() { return kPattern; }

PreTokenizer::PreTokenizer() : impl_(std::make_unique<Impl>()) {
  int err = 0;
  PCRE2_SIZE off = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                              PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &off, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof buf);
    throw Error(std::string("pre-tokenizer: PCRE2 compile failed at offset ") + std::to_string(off) + ": " +
                reinterpret_cast<char*>(buf));
  }
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

void PreTokenizer::split(std::string_view text, const std::function<void(std::size_t, std::size_t)>& on_piece) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  if (!md) throw Error("pre-tokenizer: out of memory");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t pos = 0;
  try {
    while (pos < text.size()) {
      const int rc = impl_->jit ? pcre2_jit_match(impl_->code, subject, text.size(), pos, 0, md, nullptr)
                                : pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;  // cannot happen: \s+ / punctuation cover all
      if (rc < 0) {
        PCRE2_UCHAR buf[256];
        pcre2_get_error_message(rc, buf, sizeof buf);
        throw Error("pre-tokenizer: PCRE2 match failed at byte " + std::to_string(pos) + ": " +
                    reinterpret_cast<char*>(buf));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const std::size_t b = ov[0], e = ov[1];
      if (e <= b) throw Error("pre-tokenizer: empty match at byte " + std::to_string(b));
      // tiktoken iterates find_iter: non-matching gaps are skipped (never produced here).
      on_piece(b, e - b);
      pos = e;
    }
  } catch (...) {
    pcre2_match_data_free(md);
    throw;
  }
  pcre2_match_data_free(md);
}

}  // namespace k3::tok
