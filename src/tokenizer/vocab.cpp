// tiktoken.model parser and the byte-string -> rank hash table.
#include "tokenizer/vocab.h"

#include <nlohmann/json.hpp>

#include <array>
#include <charconv>
#include <cstring>
#include <set>

#include "core/error.h"
#include "core/json_depth.h"

namespace k3::tok {
namespace {

uint64_t hash_bytes(const char* p, std::size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    p += 8;
    n -= 8;
  }
  uint64_t w = 0;
  if (n) std::memcpy(&w, p, n);
  h ^= w;
  // murmur3 fmix64: every input bit reaches the low bits used as the slot index
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

int b64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Strict standard base64 with '=' padding; returns false on any malformation.
bool b64_decode(std::string_view in, std::string& out) {
  out.clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  for (std::size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const unsigned char c = static_cast<unsigned char>(in[i + k]);
      if (c == '=') {
        if (i + 4 != in.size() || k < 2) return false;
        v[k] = 0;
        ++pad;
      } else {
        if (pad) return false;  // data after padding
        v[k] = b64_value(c);
        if (v[k] < 0) return false;
      }
    }
    const uint32_t x = (uint32_t(v[0]) << 18) | (uint32_t(v[1]) << 12) | (uint32_t(v[2]) << 6) | uint32_t(v[3]);
    out.push_back(static_cast<char>(x >> 16));
    if (pad < 2) out.push_back(static_cast<char>((x >> 8) & 0xFF));
    if (pad < 1) out.push_back(static_cast<char>(x & 0xFF));
    if ((pad == 1 && (v[2] & 0x3)) || (pad == 2 && (v[1] & 0xF))) return false;  // non-canonical
  }
  return true;
}

std::string printable(std::string_view s) {
  std::string o;
  for (unsigned char c : s.substr(0, 60)) {
    if (c >= 0x20 && c < 0x7F) o.push_back(static_cast<char>(c));
    else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      o += b;
    }
  }
  if (s.size() > 60) o += "...";
  return o;
}

}  // namespace

int32_t RankTable::find(const char* p, std::size_t n) const {
  if (slots_.empty()) return -1;
  if (n == 2) return pair_rank_[(static_cast<uint8_t>(p[0]) << 8) | static_cast<uint8_t>(p[1])];
  const uint64_t h = hash_bytes(p, n);
  const uint32_t tag = static_cast<uint32_t>(h >> 32);
  uint64_t i = h & mask_;
  while (true) {
    const uint64_t v = slots_[i];
    if (v == 0) return -1;
    if (static_cast<uint32_t>(v >> 32) == tag) {
      const uint32_t r = static_cast<uint32_t>(v) - 1;
      const uint32_t a = offsets_[r], b = offsets_[r + 1];
      if (b - a == n && std::memcmp(arena_.data() + a, p, n) == 0) return static_cast<int32_t>(r);
    }
    i = (i + 1) & mask_;
  }
}

RankTable RankTable::parse(std::string_view text, const std::string& name) {
  struct Entry {
    uint32_t off, len;
  };
  std::vector<Entry> by_rank;
  std::string arena, tok;
  std::size_t pos = 0, line_no = 0;
  std::size_t n_lines_est = 0;
  for (char c : text) n_lines_est += (c == '\n');
  by_rank.assign(n_lines_est + 1, Entry{UINT32_MAX, 0});
  std::size_t n_entries = 0;
  while (pos < text.size()) {
    ++line_no;
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::string where = name + ":" + std::to_string(line_no);
    if (line.empty()) throw Error(where + ": expected `BASE64 RANK`, found an empty line");
    const std::size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos)
      throw Error(where + ": expected exactly two space-separated fields `BASE64 RANK`, found '" + printable(line) +
                  "'");
    const std::string_view b64 = line.substr(0, sp), rank_s = line.substr(sp + 1);
    uint64_t rank = 0;
    auto [ptr, ec] = std::from_chars(rank_s.data(), rank_s.data() + rank_s.size(), rank);
    if (ec != std::errc() || ptr != rank_s.data() + rank_s.size() || rank_s.empty() ||
        (rank_s.size() > 1 && rank_s[0] == '0'))
      throw Error(where + ": expected a decimal rank, found '" + printable(rank_s) + "'");
    if (rank >= by_rank.size())
      throw Error(where + ": rank " + std::to_string(rank) + " out of range: ranks must be dense 0.." +
                  std::to_string(by_rank.size() - 1) + " for " + std::to_string(by_rank.size()) + " lines");
    if (by_rank[rank].off != UINT32_MAX) throw Error(where + ": duplicate rank " + std::to_string(rank));
    if (!b64_decode(b64, tok))
      throw Error(where + ": expected canonical base64 token bytes, found '" + printable(b64) + "'");
    if (arena.size() + tok.size() > UINT32_MAX / 2) throw Error(where + ": vocabulary too large");
    by_rank[rank] = Entry{static_cast<uint32_t>(arena.size()), static_cast<uint32_t>(tok.size())};
    arena += tok;
    ++n_entries;
  }
  if (n_entries == 0) throw Error(name + ": expected tiktoken lines `BASE64 RANK`, found no tokens");
  if (n_entries > static_cast<std::size_t>(INT32_MAX) - kNumSpecialSlots) throw Error(name + ": too many tokens");
  by_rank.resize(n_entries);  // ranks were checked < line count; now require dense 0..n-1
  for (std::size_t r = 0; r < n_entries; ++r)
    if (by_rank[r].off == UINT32_MAX)
      throw Error(name + ": ranks must be dense 0.." + std::to_string(n_entries - 1) + ", rank " + std::to_string(r) +
                  " is missing");
  RankTable t;
  t.offsets_.reserve(n_entries + 1);
  t.arena_.reserve(arena.size());
  for (const Entry& e : by_rank) {
    t.offsets_.push_back(static_cast<uint32_t>(t.arena_.size()));
    t.arena_.append(arena, e.off, e.len);
  }
  t.offsets_.push_back(static_cast<uint32_t>(t.arena_.size()));
  std::size_t cap = 16;
  while (cap < n_entries * 2) cap <<= 1;
  t.slots_.assign(cap, 0);
  t.pair_rank_.assign(65536, -1);
  t.mask_ = cap - 1;
  for (std::size_t r = 0; r < n_entries; ++r) {
    const std::string_view b = t.bytes(static_cast<int32_t>(r));
    if (t.find(b.data(), b.size()) >= 0)
      throw Error(name + ": token of rank " + std::to_string(r) + " ('" + printable(b) + "') duplicates rank " +
                  std::to_string(t.find(b.data(), b.size())));
    const uint64_t h = hash_bytes(b.data(), b.size());
    uint64_t i = h & t.mask_;
    while (t.slots_[i] != 0) i = (i + 1) & t.mask_;
    t.slots_[i] = ((h >> 32) << 32) | static_cast<uint64_t>(r + 1);
    if (b.size() == 2)
      t.pair_rank_[(static_cast<uint8_t>(b[0]) << 8) | static_cast<uint8_t>(b[1])] = static_cast<int32_t>(r);
  }
  for (int c = 0; c < 256; ++c) {
    const char ch = static_cast<char>(c);
    if (t.find(&ch, 1) < 0)
      throw Error(name + ": the single byte 0x" + [&] {
        char b[4];
        std::snprintf(b, sizeof b, "%02x", c);
        return std::string(b);
      }() + " is not in the vocabulary; all 256 single bytes are required");
  }
  return t;
}

std::vector<SpecialToken> specials_k3_default(int32_t n) {
  static const std::array<std::pair<int, const char*>, 16> kNamed = {{{0, "[BOS]"},
                                                                      {1, "[EOS]"},
                                                                      {2, "<|end_of_msg|>"},
                                                                      {3, "<|open|>"},
                                                                      {4, "<|close|>"},
                                                                      {5, "<|sep|>"},
                                                                      {6, "[start_header_id]"},
                                                                      {7, "[end_header_id]"},
                                                                      {9, "[EOT]"},
                                                                      {18, "<|media_begin|>"},
                                                                      {19, "<|media_content|>"},
                                                                      {20, "<|media_end|>"},
                                                                      {21, "<|media_pad|>"},
                                                                      {65, "<osagent_mode>"},
                                                                      {254, "[UNK]"},
                                                                      {255, "[PAD]"}}};
  std::vector<SpecialToken> out;
  for (int32_t k = 0; k < kNumSpecialSlots; ++k)
    out.push_back({n + k, "<|reserved_token_" + std::to_string(n + k) + "|>", true, false});
  for (auto [k, text] : kNamed) {
    out[k].text = text;
    out[k].named = true;
    out[k].special = !(k == 3 || k == 4 || k == 5);
  }
  return out;
}

std::vector<SpecialToken> specials_from_config(std::string_view config_json, int32_t n, const std::string& name) {
  check_json_depth(config_json, name);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(config_json);
  } catch (const nlohmann::json::exception& e) {
    throw Error(name + ": expected JSON, parse failed: " + e.what());
  }
  if (!j.is_object()) throw Error(name + ": expected a JSON object at top level");
  std::vector<SpecialToken> out;
  for (int32_t k = 0; k < kNumSpecialSlots; ++k)
    out.push_back({n + k, "<|reserved_token_" + std::to_string(n + k) + "|>", true, false});
  auto it = j.find("added_tokens_decoder");
  if (it == j.end()) return out;
  if (!it->is_object()) throw Error(name + ": key added_tokens_decoder: expected an object");
  std::set<std::string> seen;
  for (auto& [key, val] : it->items()) {
    const std::string where = name + ": added_tokens_decoder[\"" + key + "\"]";
    int64_t id = -1;
    auto [ptr, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || ptr != key.data() + key.size()) throw Error(where + ": expected a decimal id as key");
    if (id < n || id >= int64_t(n) + kNumSpecialSlots)
      throw Error(where + ": expected an id in [" + std::to_string(n) + ", " + std::to_string(n + kNumSpecialSlots) +
                  ") (after the " + std::to_string(n) + " ranks), found " + std::to_string(id));
    if (!val.is_object() || !val.contains("content") || !val["content"].is_string())
      throw Error(where + ": expected an object with a string \"content\"");
    const std::string content = val["content"].get<std::string>();
    if (content.empty()) throw Error(where + ": content is empty");
    if (!seen.insert(content).second) throw Error(where + ": duplicate content '" + content + "'");
    SpecialToken& s = out[static_cast<std::size_t>(id - n)];
    s.text = content;
    s.named = true;
    s.special = true;
    if (val.contains("special")) {
      if (!val["special"].is_boolean()) throw Error(where + ": key special: expected a boolean");
      s.special = val["special"].get<bool>();
    }
  }
  // A named token must not collide with a reserved name of another slot.
  for (const SpecialToken& s : out)
    if (!s.named && seen.count(s.text))
      throw Error(name + ": a named token spells '" + s.text + "', the reserved name of id " + std::to_string(s.id));
  return out;
}

}  // namespace k3::tok
