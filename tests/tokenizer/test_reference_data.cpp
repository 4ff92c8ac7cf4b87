// The tokenizer against the public reference data in ../shared/data/kimi-tokenizer/:
// reference_cases.json, kitoken's small/mixed line corpora and the 5,706-id UTF-8 corpus.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace {

using k3::Tokenizer;

std::vector<int32_t> parse_ids(const std::string& line) {
  std::vector<int32_t> ids;
  std::stringstream ss(line);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    const auto b = tok.find_first_not_of(" \t\r");
    if (b == std::string::npos) continue;
    ids.push_back(std::stoi(tok.substr(b)));
  }
  return ids;
}

// Rust str::lines(): split on \n, strip one trailing \r; the README says skip empty lines.
std::vector<std::string> rust_lines(const std::string& s) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t e = s.find('\n', pos);
    if (e == std::string::npos) e = s.size();
    std::string l = s.substr(pos, e - pos);
    if (!l.empty() && l.back() == '\r') l.pop_back();
    if (!l.empty()) out.push_back(l);
    pos = e + 1;
  }
  return out;
}

std::string unescape_kitoken(const std::string& l) {
  std::string o;
  for (std::size_t i = 0; i < l.size(); ++i) {
    if (l[i] == '\\' && i + 1 < l.size()) {
      if (l[i + 1] == 'n') {
        o += '\n';
        ++i;
        continue;
      }
      if (l[i + 1] == 's') {
        o += ' ';
        ++i;
        continue;
      }
      if (l[i + 1] == 'x') {
        ++i;
        continue;
      }
    }
    o += l[i];
  }
  return o;
}

TEST(TokenizerReference, ReferenceCasesEncodeAndDecode) {
  const Tokenizer& t = k3test::kimi();
  const auto j = nlohmann::json::parse(k3test::read(k3test::data_dir() + "/reference_cases.json"));
  int n = 0;
  for (const auto& c : j["cases"]) {
    const std::string in = c["input"];
    const auto expected = c["expected"].get<std::vector<int32_t>>();
    EXPECT_EQ(t.encode(in), expected) << "input: " << in;
    EXPECT_EQ(t.decode(expected), in);
    ++n;
  }
  EXPECT_EQ(n, 50);
}

void check_line_corpus(const std::string& name, int expected_lines) {
  const Tokenizer& t = k3test::kimi();
  const auto in = rust_lines(k3test::read(k3test::data_dir() + "/testdata/" + name + "_input.txt"));
  const auto ids = rust_lines(k3test::read(k3test::data_dir() + "/testdata/" + name + "_tokens_kimi_k2.txt"));
  ASSERT_EQ(in.size(), ids.size());
  EXPECT_EQ(static_cast<int>(in.size()), expected_lines);
  for (std::size_t k = 0; k < in.size(); ++k) {
    const std::string text = unescape_kitoken(in[k]);
    const auto expected = parse_ids(ids[k]);
    EXPECT_EQ(t.encode(text), expected) << name << " line " << k + 1 << ": " << text;
    EXPECT_EQ(t.decode(expected), text) << name << " line " << k + 1;
  }
}

TEST(TokenizerReference, KitokenSmallLines) { check_line_corpus("small", 20); }
TEST(TokenizerReference, KitokenMixedLines) { check_line_corpus("mixed", 120); }

TEST(TokenizerReference, KitokenUtf8Corpus) {
  const Tokenizer& t = k3test::kimi();
  const std::string text = k3test::read(k3test::data_dir() + "/testdata/utf8_input.txt");
  std::vector<int32_t> expected;
  for (const auto& l : rust_lines(k3test::read(k3test::data_dir() + "/testdata/utf8_tokens_kimi_k2.txt"))) {
    const auto v = parse_ids(l);
    expected.insert(expected.end(), v.begin(), v.end());
  }
  EXPECT_EQ(expected.size(), 5706u);
  EXPECT_EQ(t.encode(text), expected);
  EXPECT_EQ(t.decode(expected), text);
}

}  // namespace
