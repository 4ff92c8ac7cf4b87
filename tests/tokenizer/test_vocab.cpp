// tiktoken.model / tokenizer_config.json parsing on small synthetic vocabularies (K3-mini
// shape: N ranks, specials at N..N+255).
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

std::string b64(const std::string& s) {
  static const char* A = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string o;
  std::size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    const uint32_t x = (uint8_t(s[i]) << 16) | (uint8_t(s[i + 1]) << 8) | uint8_t(s[i + 2]);
    o += A[x >> 18];
    o += A[(x >> 12) & 63];
    o += A[(x >> 6) & 63];
    o += A[x & 63];
  }
  if (s.size() - i == 1) {
    const uint32_t x = uint8_t(s[i]) << 16;
    o += A[x >> 18];
    o += A[(x >> 12) & 63];
    o += "==";
  } else if (s.size() - i == 2) {
    const uint32_t x = (uint8_t(s[i]) << 16) | (uint8_t(s[i + 1]) << 8);
    o += A[x >> 18];
    o += A[(x >> 12) & 63];
    o += A[(x >> 6) & 63];
    o += '=';
  }
  return o;
}

// 256 bytes + a few merges: "he" 256, "ll" 257, "hell" 258, "o " 259
std::string tiny_model() {
  std::string m;
  for (int c = 0; c < 256; ++c) m += b64(std::string(1, char(c))) + " " + std::to_string(c) + "\n";
  const char* merges[] = {"he", "ll", "hell", "o "};
  for (int k = 0; k < 4; ++k) m += b64(merges[k]) + " " + std::to_string(256 + k) + "\n";
  return m;
}

TEST(Vocab, TinyVocabularyEncodesByRank) {
  const auto t = k3::Tokenizer::from_strings(tiny_model(), "");
  EXPECT_EQ(t.n_ranks(), 260);
  EXPECT_EQ(t.vocab_size(), 516);
  EXPECT_EQ(t.encode("hello"), (std::vector<int32_t>{258, 'o'}));
  EXPECT_EQ(t.end_of_msg_id(), 262);
  EXPECT_EQ(t.special_id("<|open|>"), 263);
  EXPECT_EQ(t.token_bytes(261), "[EOS]");
  EXPECT_EQ(t.token_bytes(300), "<|reserved_token_300|>");
}

TEST(Vocab, ConfigPlacesSpecialsAfterTheRanks) {
  const std::string cfg = R"({"added_tokens_decoder":{
     "260":{"content":"[BOS]","special":true},"261":{"content":"[EOS]","special":true},
     "262":{"content":"<|end_of_msg|>","special":true},"263":{"content":"<|open|>","special":false},
     "264":{"content":"<|close|>","special":false},"265":{"content":"<|sep|>","special":false}}})";
  const auto t = k3::Tokenizer::from_strings(tiny_model(), cfg);
  EXPECT_EQ(t.special_id("<|sep|>"), 265);
  EXPECT_FALSE(t.specials()[5].special);
  EXPECT_EQ(t.decode({263, 262}, true), "<|open|>");
  EXPECT_THROW(k3::Tokenizer::from_strings(tiny_model(), R"({"added_tokens_decoder":{"516":{"content":"x"}}})"),
               k3::Error);
  EXPECT_THROW(k3::Tokenizer::from_strings(tiny_model(), R"({"added_tokens_decoder":{"259":{"content":"x"}}})"),
               k3::Error);
  EXPECT_THROW(k3::Tokenizer::from_strings(tiny_model(), "{not json"), k3::Error);
}

TEST(Vocab, MalformedFilesAreErrorsNamingTheLine) {
  const std::string good = tiny_model();
  auto expect_error = [](const std::string& text, const std::string& needle) {
    try {
      (void)k3::Tokenizer::from_strings(text, "", "m.tiktoken");
      ADD_FAILURE() << "no error for " << needle;
    } catch (const k3::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(good + "aGk= 259\n", "m.tiktoken:261: duplicate rank 259");
  expect_error(good + "aGk=\n", "m.tiktoken:261: expected exactly two");
  expect_error(good + "a@k= 260\n", "m.tiktoken:261: expected canonical base64");
  expect_error(good + "aGk= 999\n", "out of range");
  expect_error(good + "aGVsbA== 260\n", "duplicates rank 258");
  expect_error("", "no tokens");
  expect_error(good.substr(good.find('\n') + 1), "rank 0 is missing");
}

}  // namespace
