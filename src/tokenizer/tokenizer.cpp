// Tokenizer: loading, Kimi chunking, special-token splitting, encode/decode.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/read_file.h"
#include "tokenizer/bpe.h"
#include "tokenizer/utf8.h"

namespace k3 {
namespace {

std::string read_file(const std::filesystem::path& p) {
  ReadLimits lim;
  lim.max_bytes = kMetadataFileLimit;
  return read_file_bounded(p, p.filename().string(), lim);
}

}  // namespace

Tokenizer Tokenizer::from_strings(std::string_view tiktoken_text, std::string_view config_json,
                                  const std::string& name) {
  Tokenizer t;
  t.ranks_ = tok::RankTable::parse(tiktoken_text, name);
  t.specials_ = config_json.empty() ? tok::specials_k3_default(t.ranks_.size())
                                    : tok::specials_from_config(config_json, t.ranks_.size(), name + " (config)");
  for (const auto& s : t.specials_) t.special_by_text_.emplace(s.text, s.id);
  return t;
}

Tokenizer Tokenizer::from_files(const std::filesystem::path& tiktoken_path, const std::filesystem::path& config_path) {
  const std::string model = read_file(tiktoken_path);
  Tokenizer t;
  t.ranks_ = tok::RankTable::parse(model, tiktoken_path.string());
  if (config_path.empty()) {
    t.specials_ = tok::specials_k3_default(t.ranks_.size());
  } else {
    t.specials_ = tok::specials_from_config(read_file(config_path), t.ranks_.size(), config_path.string());
  }
  for (const auto& s : t.specials_) t.special_by_text_.emplace(s.text, s.id);
  return t;
}

Tokenizer Tokenizer::load(const std::filesystem::path& dir) {
  const auto model = dir / "tiktoken.model";
  if (!std::filesystem::exists(model))
    throw Error(model.string() + ": not found (expected the tiktoken vocabulary in the model folder)");
  const auto cfg = dir / "tokenizer_config.json";
  return from_files(model, std::filesystem::exists(cfg) ? cfg : std::filesystem::path());
}

int32_t Tokenizer::special_id(std::string_view text) const {
  auto it = special_by_text_.find(std::string(text));
  return it == special_by_text_.end() ? -1 : it->second;
}

int32_t Tokenizer::require_special(std::string_view text) const {
  const int32_t id = special_id(text);
  if (id < 0) throw Error("tokenizer: special token '" + std::string(text) + "' is not in the special table");
  return id;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id >= 0 && id < ranks_.size()) return ranks_.bytes(id);
  if (is_special(id)) return specials_[static_cast<std::size_t>(id - n_ranks())].text;
  throw Error("tokenizer: id " + std::to_string(id) + " out of range [0, " + std::to_string(vocab_size()) + ")");
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (skip_special && is_special(id) && specials_[static_cast<std::size_t>(id - n_ranks())].special) continue;
    out += token_bytes(id);
  }
  return out;
}

void Tokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
  pretok_.split(text, [&](std::size_t b, std::size_t n) { tok::bpe_encode(ranks_, text.substr(b, n), out); });
}

void Tokenizer::encode_part(std::string_view part, const std::vector<int32_t>& allowed,
                            std::vector<int32_t>& out) const {
  if (allowed.empty()) {
    encode_ordinary(part, out);
    return;
  }
  // tiktoken: find the earliest allowed special (longest at that position), encode the text
  // before it with the pattern, emit the special id, continue after it.
  std::string first_bytes;
  for (int32_t id : allowed) {
    const char c = specials_[static_cast<std::size_t>(id - n_ranks())].text[0];
    if (first_bytes.find(c) == std::string::npos) first_bytes.push_back(c);
  }
  std::size_t start = 0, pos = 0;
  while (pos < part.size()) {
    const std::size_t cand = part.find_first_of(first_bytes, pos);
    if (cand == std::string_view::npos) break;
    int32_t best = -1;
    std::size_t best_len = 0;
    for (int32_t id : allowed) {
      const std::string& t = specials_[static_cast<std::size_t>(id - n_ranks())].text;
      if (t.size() > best_len && part.compare(cand, t.size(), t) == 0) {
        best = id;
        best_len = t.size();
      }
    }
    if (best < 0) {
      pos = cand + 1;
      continue;
    }
    encode_ordinary(part.substr(start, cand - start), out);
    out.push_back(best);
    start = pos = cand + best_len;
  }
  encode_ordinary(part.substr(start), out);
}

void Tokenizer::for_each_chunk(std::string_view text, const std::function<void(std::string_view)>& emit) {
  // tokenization_kimi.py: 400,000-code-point windows, each cut so that no slice holds more
  // than 25,000 consecutive Python-isspace (or non-isspace) code points.
  std::size_t pos = 0, win_chars = 0, slice_start = 0, run = 0;
  bool run_space = false, first = true;
  while (pos < text.size()) {
    const auto st = tok::utf8_step(text, pos);
    const bool sp = tok::py_isspace(st.cp);
    if (first) {
      run_space = sp;
      first = false;
    }
    if (sp != run_space) {
      run = 1;
      run_space = sp;
    } else if (++run > kMaxRunChars) {
      emit(text.substr(slice_start, pos - slice_start));
      slice_start = pos;
      run = 1;
    }
    pos += st.len;
    if (++win_chars == kMaxEncodeChars && pos < text.size()) {
      emit(text.substr(slice_start, pos - slice_start));
      slice_start = pos;
      win_chars = 0;
      run = 0;
      first = true;
    }
  }
  if (slice_start < text.size()) emit(text.substr(slice_start));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const AllowedSpecials& allowed) const {
  return *encode_at_most(text, std::numeric_limits<std::size_t>::max() - 1, allowed);
}

std::optional<std::vector<int32_t>> Tokenizer::encode_at_most(std::string_view text_in, std::size_t max_tokens,
                                                              const AllowedSpecials& allowed) const {
  std::string repaired;
  std::string_view text = text_in;
  if (!tok::utf8_valid(text)) {
    repaired = tok::utf8_sanitize(text);
    text = repaired;
  }
  std::vector<int32_t> allowed_ids;
  if (allowed.is_all()) {
    for (const auto& s : specials_) allowed_ids.push_back(s.id);
  } else {
    for (const auto& n : allowed.names()) allowed_ids.push_back(require_special(n));
  }
  std::vector<int32_t> out;
  out.reserve(std::min(text.size() / 3 + 8, max_tokens + 1));
  bool over = false;
  for_each_chunk(text, [&](std::string_view part) {
    if (over) return;
    encode_part(part, allowed_ids, out);
    over = out.size() > max_tokens;
  });
  if (over) return std::nullopt;
  return out;
}

}  // namespace k3
