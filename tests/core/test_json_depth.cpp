// core/json_depth.h: the nesting bound every k3 JSON reader checks before parsing.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/json_depth.h"

namespace {

std::string nested(int depth, const std::string& inner = "") {
  return std::string(static_cast<std::size_t>(depth), '[') + inner + std::string(static_cast<std::size_t>(depth), ']');
}

TEST(JsonDepth, CountsArraysAndObjectsOutsideStrings) {
  EXPECT_EQ(k3::scan_json_depth("1").depth, 0);
  EXPECT_EQ(k3::scan_json_depth("[]").depth, 1);
  EXPECT_EQ(k3::scan_json_depth(R"({"a": [1, {"b": []}], "c": {}})").depth, 4);
  // Brackets inside strings, escaped quotes and escaped backslashes are not structure.
  EXPECT_EQ(k3::scan_json_depth(R"({"a": "[[[[{{{{", "b": "\"[[[", "c": "\\"})").depth, 1);
  EXPECT_EQ(k3::scan_json_depth(R"(["\\", [1]])").depth, 2);
  // Unmatched closers never make the depth negative (so they cannot hide openers after them).
  EXPECT_EQ(k3::scan_json_depth("]]]]" + nested(3)).depth, 3);
}

TEST(JsonDepth, LimitIsInclusive) {
  EXPECT_EQ(k3::kMaxJsonDepth, 64);
  EXPECT_TRUE(k3::json_depth_within(nested(64)));
  EXPECT_FALSE(k3::json_depth_within(nested(65)));
  const k3::JsonDepthScan s = k3::scan_json_depth(nested(65));
  EXPECT_TRUE(s.exceeded);
  EXPECT_EQ(s.depth, 65);
  EXPECT_EQ(s.offset, 64u);  // the 65th '['
  EXPECT_TRUE(k3::json_depth_within(nested(3), 3));
  EXPECT_FALSE(k3::json_depth_within(nested(4), 3));
}

TEST(JsonDepth, FiftyThousandDeepStopsAtTheLimitAndNamesTheTopLevelKey) {
  const std::string text = R"({"format": "x", "ids": [1, 2], "extra": )" + nested(50000) + "}";
  const k3::JsonDepthScan s = k3::scan_json_depth(text);
  EXPECT_TRUE(s.exceeded);
  EXPECT_EQ(s.depth, 65);
  EXPECT_EQ(s.top_key, "extra");
  EXPECT_EQ(k3::json_depth_message(s), "JSON nested deeper than 64 levels (in the value of key \"extra\")");
  try {
    k3::check_json_depth(text, "state.bin: header");
    FAIL() << "accepted";
  } catch (const k3::Error& e) {
    EXPECT_STREQ(e.what(), "state.bin: header: JSON nested deeper than 64 levels (in the value of key \"extra\")");
  }
  // A top-level array names no key; a key whose value closed is not blamed for the next one.
  EXPECT_EQ(k3::scan_json_depth(nested(70)).top_key, "");
  EXPECT_EQ(k3::scan_json_depth(R"({"a": [1], "b": )" + nested(70) + "}").top_key, "b");
  EXPECT_EQ(k3::scan_json_depth(R"({"a": {"x": 1, "y": )" + nested(70) + "}}").top_key, "a");
  EXPECT_NO_THROW(k3::check_json_depth(nested(64), "x"));
}

}  // namespace
