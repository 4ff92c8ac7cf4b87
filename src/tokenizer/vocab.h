// The tiktoken vocabulary: raw token bytes <-> rank (= id), and the 256-slot special block
// that sits directly after the ranks (spec tokenizer.md §1, §3; k3-architecture.md §5.1).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace k3::tok {

/// Byte-string -> rank hash table over one contiguous byte arena. Immutable after build.
class RankTable {
 public:
  /// Rank of the exact byte string, or -1 when it is not a vocabulary entry.
  int32_t find(const char* p, std::size_t n) const;
  int32_t find(std::string_view s) const { return find(s.data(), s.size()); }
  /// Bytes of token `rank`; requires 0 <= rank < size().
  std::string_view bytes(int32_t rank) const {
    return {arena_.data() + offsets_[rank], offsets_[rank + 1] - offsets_[rank]};
  }
  int32_t size() const { return static_cast<int32_t>(offsets_.size()) - 1; }

  /// Parses a tiktoken.model text: one `BASE64 RANK\n` line per token. Checks that every
  /// line has exactly two fields, the base64 is canonical, ranks are dense 0..N-1 (any line
  /// order), tokens are unique and non-empty, and all 256 single bytes are present.
  /// `name` (a path) is used in errors. Errors: k3::Error naming name:line, expected vs found.
  static RankTable parse(std::string_view text, const std::string& name);

 private:
  std::string arena_;
  std::vector<uint32_t> offsets_;   // size N+1
  std::vector<uint64_t> slots_;     // open addressing: (hash tag << 32) | (rank+1); 0 = empty
  std::vector<int32_t> pair_rank_;  // 65536 entries: rank of each 2-byte string or -1
  uint64_t mask_ = 0;
};

/// One slot of the special block: id = n_ranks + index.
struct SpecialToken {
  int32_t id;
  std::string text;  ///< e.g. "<|end_of_msg|>" or "<|reserved_token_163700|>"
  bool special;      ///< HF `special` flag: false for <|open|>, <|close|>, <|sep|>
  bool named;        ///< listed in added_tokens_decoder (or the built-in K3 table)
};

/// Number of reserved special ids after the ranks (K2/K3: 256).
inline constexpr int32_t kNumSpecialSlots = 256;

/// The 256 specials for a vocabulary of n_ranks ranks, from tokenizer_config.json's
/// `added_tokens_decoder` (keys are absolute ids as strings, values {"content", "special"}).
/// Every id must lie in [n_ranks, n_ranks+256) and every content must be unique; other slots
/// become `<|reserved_token_{id}|>`. `name` is used in errors (k3::Error).
std::vector<SpecialToken> specials_from_config(std::string_view config_json, int32_t n_ranks, const std::string& name);

/// The K3 table of spec tokenizer.md §3.2, offset to start at n_ranks (used when no
/// tokenizer_config.json is present).
std::vector<SpecialToken> specials_k3_default(int32_t n_ranks);

}  // namespace k3::tok
