// ChatStream: markup stripped, channels split, tool blocks hidden, UTF-8 held across tokens.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/chat_stream.h"
#include "runtime_test_util.h"

namespace {

const k3::Tokenizer& byte_tok() {
  static const k3::Tokenizer t = k3::Tokenizer::from_strings(k3test::byte_tiktoken_model(), "");
  return t;
}

void add_text(std::vector<int32_t>& ids, const std::string& s) {
  for (unsigned char c : s) ids.push_back(c);
}

// Runs the stream and concatenates per channel: {reasoning, content}; also counts pieces.
std::pair<std::string, std::string> run(const std::vector<int32_t>& ids, bool think, int* n_pieces = nullptr) {
  k3::ChatStream s(byte_tok(), think);
  std::string r, c;
  int n = 0;
  auto take = [&](const std::vector<k3::ChatPiece>& ps) {
    for (const auto& p : ps) {
      ++n;
      EXPECT_NE(p.channel, k3::ChatChannel::Hidden);
      (p.channel == k3::ChatChannel::Reasoning ? r : c) += p.text;
    }
  };
  for (int32_t id : ids) take(s.push(id));
  take(s.flush());
  if (n_pieces) *n_pieces = n;
  return {r, c};
}

}  // namespace

TEST(ChatStream, SplitsReasoningAndContentAndStripsMarkup) {
  const auto& t = byte_tok();
  std::vector<int32_t> ids;
  add_text(ids, "let me think");
  ids.push_back(t.close_id());
  add_text(ids, "think");
  ids.push_back(t.sep_id());
  ids.push_back(t.open_id());
  add_text(ids, "response");
  ids.push_back(t.sep_id());
  add_text(ids, "Hello!");
  ids.push_back(t.close_id());
  add_text(ids, "response");
  ids.push_back(t.sep_id());
  ids.push_back(t.close_id());
  add_text(ids, "message");
  ids.push_back(t.sep_id());
  ids.push_back(t.end_of_msg_id());
  const auto [r, c] = run(ids, true);
  EXPECT_EQ(r, "let me think");
  EXPECT_EQ(c, "Hello!");
}

TEST(ChatStream, NoThinkPromptStartsInContentAndToolsAreHidden) {
  const auto& t = byte_tok();
  std::vector<int32_t> ids;
  add_text(ids, "Sure.");
  ids.push_back(t.close_id());
  add_text(ids, "response");
  ids.push_back(t.sep_id());
  ids.push_back(t.open_id());
  add_text(ids, "tools");
  ids.push_back(t.sep_id());
  ids.push_back(t.open_id());
  add_text(ids, "call tool=\"f\" index=\"0\"");
  ids.push_back(t.sep_id());
  add_text(ids, "{\"x\":1}");
  ids.push_back(t.close_id());
  add_text(ids, "call");
  ids.push_back(t.sep_id());
  ids.push_back(t.bos_id());
  const auto [r, c] = run(ids, false);
  EXPECT_EQ(r, "");
  EXPECT_EQ(c, "Sure.");
}

TEST(ChatStream, Utf8SplitAcrossTokensIsHeldUntilComplete) {
  const auto& t = byte_tok();
  k3::ChatStream s(t, false);
  EXPECT_TRUE(s.push(0xC3).empty());  // first byte of "é"
  const auto p = s.push(0xA9);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].text, "\xC3\xA9");
  EXPECT_EQ(p[0].channel, k3::ChatChannel::Content);
  // an incomplete character at a channel switch is flushed as U+FFFD in its own channel
  k3::ChatStream s2(t, true);
  EXPECT_TRUE(s2.push(0xE2).empty());
  const auto q = s2.push(t.close_id());
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].channel, k3::ChatChannel::Reasoning);
  EXPECT_EQ(q[0].text, "\xEF\xBF\xBD");
  EXPECT_THROW(s2.push(t.vocab_size()), k3::Error);
  EXPECT_THROW(s2.push(-1), k3::Error);
}
