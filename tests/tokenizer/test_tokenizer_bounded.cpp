// Tokenizer::encode_at_most: the ids of encode() when the text holds at most the limit, nullopt
// beyond it, deciding after at most one Kimi chunk past the limit (what bounds the memory of
// `k3 serve`'s /tokenize and prompt tokenization).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer_test_util.h"

namespace {

using Ids = std::vector<int32_t>;

TEST(TokenizerBounded, EqualsEncodeUpToTheLimitAndRefusesPastIt) {
  const auto& t = k3test::kimi();
  std::string text;
  while (text.size() < 40000)
    text += "In the beginning God created the heaven and the earth. 1234567 \xE4\xBD\xA0\xE5\xA5\xBD! ";
  text += std::string(30000, 'a');  // a run Kimi's chunking cuts: several chunks
  const Ids all = t.encode(text);
  ASSERT_GT(all.size(), 1000u);
  for (size_t limit : {all.size(), all.size() + 1, all.size() * 2}) {
    const auto got = t.encode_at_most(text, limit);
    ASSERT_TRUE(got.has_value()) << limit;
    EXPECT_EQ(*got, all) << limit;
  }
  for (size_t limit : {size_t{0}, size_t{1}, all.size() / 2, all.size() - 1})
    EXPECT_FALSE(t.encode_at_most(text, limit).has_value()) << limit;
  // Specials are honoured as by encode().
  EXPECT_EQ(*t.encode_at_most("a<|end_of_msg|>b", 3, k3::AllowedSpecials::all()), (Ids{64, 163586, 65}));
  EXPECT_FALSE(t.encode_at_most("a<|end_of_msg|>b", 2, k3::AllowedSpecials::all()).has_value());
}

TEST(TokenizerBounded, RefusesAMultiChunkTextOverTheLimit) {
  // 8 MiB of single-character words (~4M ids, 21 chunks): refused at a limit of 1000, answered
  // whole at a limit above its count (the memory bound itself is tested end to end by
  // tests/python/test_server_tokenize_limits.py).
  const auto& t = k3test::kimi();
  std::string huge;
  while (huge.size() < (8u << 20)) huge += "a b c d e f g h ";
  EXPECT_FALSE(t.encode_at_most(huge, 1000).has_value());
  const auto all = t.encode_at_most(huge, 8u << 20);
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->size(), t.encode(huge).size());
}

}  // namespace
