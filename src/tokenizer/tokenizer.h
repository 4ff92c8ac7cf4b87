// k3::Tokenizer — Kimi's tiktoken rank-BPE tokenizer (spec tokenizer.md §1–§3,
// k3-architecture.md §5.1): ids 0..N-1 are the ranks of tiktoken.model, ids N..N+255 the
// special block (vocab_size = N + 256; N = 163,584 for K3, smaller for K3-mini).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab.h"

namespace k3 {

/// Which special-token spellings `Tokenizer::encode` turns into control ids.
class AllowedSpecials {
 public:
  static AllowedSpecials none() { return AllowedSpecials(false, {}); }
  /// Every one of the 256 slots, reserved names included (Kimi's allow_special_tokens=True).
  static AllowedSpecials all() { return AllowedSpecials(true, {}); }
  /// Only the listed spellings (each must name a special; checked by encode).
  static AllowedSpecials only(std::vector<std::string> names) { return AllowedSpecials(false, std::move(names)); }
  bool is_all() const { return all_; }
  const std::vector<std::string>& names() const { return names_; }
  bool is_none() const { return !all_ && names_.empty(); }

 private:
  AllowedSpecials(bool all, std::vector<std::string> n) : all_(all), names_(std::move(n)) {}
  bool all_;
  std::vector<std::string> names_;
};

/// Encoder/decoder over a tiktoken.model vocabulary plus the 256-slot special block.
///
/// Encoding follows tokenization_kimi.py + tiktoken exactly: text is cut into 400,000-code-point
/// windows, each window into runs of at most 25,000 consecutive Python-isspace / non-space code
/// points; each part is split at allowed special spellings (earliest match first), the rest is
/// pre-tokenized with Kimi's pattern and rank-BPE'd per piece.
/// Input that is not valid UTF-8 is first repaired: every maximal invalid subsequence becomes
/// U+FFFD, as Python's bytes.decode('utf-8', 'replace') does (tiktoken itself only takes str).
/// Immutable after construction; const methods are thread-safe.
class Tokenizer {
 public:
  /// Loads DIR/tiktoken.model and, when present, DIR/tokenizer_config.json.
  /// Errors: k3::Error naming the file (missing, malformed line, bad special id...).
  static Tokenizer load(const std::filesystem::path& model_dir);
  /// Loads a tiktoken.model file and an optional tokenizer_config.json (empty path: use the
  /// K3 special table of spec §3.2 placed after the ranks). Errors: k3::Error.
  static Tokenizer from_files(const std::filesystem::path& tiktoken_path,
                              const std::filesystem::path& tokenizer_config_path = {});
  /// From in-memory file contents (config_json empty: K3 default table). `name` labels errors.
  static Tokenizer from_strings(std::string_view tiktoken_text, std::string_view config_json,
                                const std::string& name = "<memory>");

  /// Token ids of `text` (bytes; invalid UTF-8 repaired as above). By default special-token
  /// spellings are ordinary text. Errors: k3::Error for an `only(...)` name that is not a special.
  std::vector<int32_t> encode(std::string_view text, const AllowedSpecials& allowed = AllowedSpecials::none()) const;
  /// encode() bounded by its output: nullopt as soon as the text is known to hold more than
  /// `max_tokens` ids (checked after each chunk of at most kMaxEncodeChars code points, so the
  /// ids held never exceed max_tokens + one chunk's), else the ids, equal to encode()'s.
  std::optional<std::vector<int32_t>> encode_at_most(std::string_view text, std::size_t max_tokens,
                                                     const AllowedSpecials& allowed = AllowedSpecials::none()) const;
  /// Encode without special handling and without chunking (one tiktoken encode_ordinary call
  /// on already-valid UTF-8); exposed for tests and benchmarks.
  void encode_ordinary(std::string_view valid_utf8, std::vector<int32_t>& out) const;

  /// Concatenated bytes of the ids (may be invalid UTF-8 when cut mid-character; no spaces
  /// around specials). skip_special drops specials flagged special=true (keeps <|open|> etc.).
  /// Errors: k3::Error for an id outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  /// Raw bytes of one id: its rank bytes or its special spelling (reserved: <|reserved_token_N|>).
  /// Errors: k3::Error for an id outside [0, vocab_size()).
  std::string_view token_bytes(int32_t id) const;

  int32_t n_ranks() const { return ranks_.size(); }
  int32_t vocab_size() const { return ranks_.size() + tok::kNumSpecialSlots; }
  bool is_special(int32_t id) const { return id >= n_ranks() && id < vocab_size(); }
  /// The special block (index = id - n_ranks()).
  const std::vector<tok::SpecialToken>& specials() const { return specials_; }
  /// Id of a special by spelling, or -1.
  int32_t special_id(std::string_view text) const;
  /// Id of a special by spelling. Errors: k3::Error naming the missing token.
  int32_t require_special(std::string_view text) const;

  int32_t bos_id() const { return n_ranks() + 0; }
  int32_t eos_id() const { return n_ranks() + 1; }
  /// K3's <|end_of_msg|> (N+2) and the structural markers (N+3, N+4, N+5).
  int32_t end_of_msg_id() const { return n_ranks() + 2; }
  int32_t open_id() const { return n_ranks() + 3; }
  int32_t close_id() const { return n_ranks() + 4; }
  int32_t sep_id() const { return n_ranks() + 5; }

  /// Kimi's chunking of valid UTF-8 text (see class comment); emit gets each slice in order.
  static void for_each_chunk(std::string_view text, const std::function<void(std::string_view)>& emit);
  /// Kimi's chunking limits (tokenization_kimi.py).
  static constexpr std::size_t kMaxEncodeChars = 400000;
  static constexpr std::size_t kMaxRunChars = 25000;

 private:
  Tokenizer() = default;
  void encode_part(std::string_view part, const std::vector<int32_t>& allowed_ids, std::vector<int32_t>& out) const;

  tok::RankTable ranks_;
  std::vector<tok::SpecialToken> specials_;
  std::unordered_map<std::string, int32_t> special_by_text_;
  tok::PreTokenizer pretok_;
};

}  // namespace k3
