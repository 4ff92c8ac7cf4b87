// escape_for_log (tools/server/http_transport.h): request text in log lines cannot carry
// control characters (a forged line, terminal escapes).
#include <gtest/gtest.h>

#include <string>

#include "http_transport.h"

using k3::server::escape_for_log;

TEST(EscapeForLog, PrintableAsciiIsKept) {
  EXPECT_EQ(escape_for_log("/v1/chat/completions?x=1 ~"), "/v1/chat/completions?x=1 ~");
  EXPECT_EQ(escape_for_log(""), "");
}

TEST(EscapeForLog, ControlBytesBackslashAndNonAsciiAreHexEscaped) {
  EXPECT_EQ(escape_for_log("/a\r\nk3 serve: GET /forged 200"), "/a\\x0d\\x0ak3 serve: GET /forged 200");
  EXPECT_EQ(escape_for_log(std::string("\x1b[2J\x7f\t", 6)), "\\x1b[2J\\x7f\\x09");
  EXPECT_EQ(escape_for_log(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(escape_for_log("\\x0d"), "\\x5cx0d");  // a literal backslash cannot fake an escape
  EXPECT_EQ(escape_for_log("\xc3\xa9"), "\\xc3\\xa9");
}
