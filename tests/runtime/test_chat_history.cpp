// fit_chat_to_context (runtime/chat_history.h): the chat keeps its conversation when the context
// fills (issue #15 item 6): the oldest turns go, the system message and the newest message stay,
// and a message that cannot fit at all is reported instead of ending the chat.
#include <gtest/gtest.h>

#include <string>

#include "runtime/chat_history.h"
#include "runtime_test_util.h"

namespace {

const k3::Tokenizer& byte_tok() {
  static const k3::Tokenizer t = k3::Tokenizer::from_strings(k3test::byte_tiktoken_model(), "");
  return t;
}

nlohmann::ordered_json msg(const char* role, const std::string& content) {
  return {{"role", role}, {"content", content}};
}

}  // namespace

TEST(ChatHistory, DropsOldestTurnsKeepsSystemAndNewest) {
  k3::ChatOptions opt;
  opt.thinking = false;
  nlohmann::ordered_json m = nlohmann::ordered_json::array();
  m.push_back(msg("system", "be brief"));
  for (int i = 0; i < 6; ++i) {
    m.push_back(msg("user", "question " + std::to_string(i) + std::string(40, 'q')));
    m.push_back(msg("assistant", "answer " + std::to_string(i) + std::string(40, 'a')));
  }
  m.push_back(msg("user", "newest"));
  const int64_t full = static_cast<int64_t>(k3::render_chat(byte_tok(), m, opt).size());
  // everything fits: nothing dropped
  nlohmann::ordered_json a = m;
  k3::ChatFit f = k3::fit_chat_to_context(byte_tok(), a, opt, full + 10, 5);
  EXPECT_TRUE(f.fits);
  EXPECT_EQ(f.dropped_turns, 0);
  EXPECT_EQ(a.size(), m.size());
  // half the room: old turns go, in order, whole turns (user + assistant)
  a = m;
  f = k3::fit_chat_to_context(byte_tok(), a, opt, full / 2, 8);
  ASSERT_TRUE(f.fits);
  EXPECT_GT(f.dropped_turns, 0);
  EXPECT_EQ(a.size(), m.size() - 2 * static_cast<size_t>(f.dropped_turns));
  EXPECT_EQ(a[0]["role"], "system");
  EXPECT_EQ(a[1]["role"], "user");
  EXPECT_EQ(a[1]["content"], m[1 + 2 * f.dropped_turns]["content"]);
  EXPECT_EQ(a.back()["content"], "newest");
  EXPECT_LE(static_cast<int64_t>(f.prompt.size()) + 8, full / 2);
  EXPECT_EQ(f.prompt, k3::render_chat(byte_tok(), a, opt));
  EXPECT_EQ(f.dropped_tokens, full - static_cast<int64_t>(f.prompt.size()));
}

TEST(ChatHistory, MessageThatCannotFitIsReported) {
  k3::ChatOptions opt;
  nlohmann::ordered_json m = nlohmann::ordered_json::array();
  m.push_back(msg("user", "hi"));
  m.push_back(msg("assistant", "hello"));
  m.push_back(msg("user", std::string(500, 'x')));
  k3::ChatFit f = k3::fit_chat_to_context(byte_tok(), m, opt, 100, 10);
  EXPECT_FALSE(f.fits);
  EXPECT_TRUE(f.prompt.empty());
  ASSERT_EQ(m.size(), 1u);  // only the newest is left; the caller restores its copy
  // it fits without the reserve: sent, the answer may end at the context
  nlohmann::ordered_json s = nlohmann::ordered_json::array();
  s.push_back(msg("user", std::string(60, 'y')));
  const int64_t n = static_cast<int64_t>(k3::render_chat(byte_tok(), s, opt).size());
  f = k3::fit_chat_to_context(byte_tok(), s, opt, n + 1, 50);
  EXPECT_TRUE(f.fits);
  EXPECT_EQ(static_cast<int64_t>(f.prompt.size()), n);
}
