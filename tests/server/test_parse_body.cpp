// parse_body on hostile bodies found by fuzz/server_request.cpp: every failure is an ApiError
// 400 naming the body, never an escaping nlohmann exception (which would end the process).
#include <gtest/gtest.h>

#include <string>

#include "api_error.h"
#include "openai_request.h"

namespace {

int status_of(const std::string& body) {
  try {
    k3::server::parse_body(body);
    return 200;
  } catch (const k3::server::ApiError& e) {
    return e.status();
  }
}

TEST(ParseBody, NumbersBeyondADoubleAreA400) {
  EXPECT_EQ(status_of("55555e5555555555755"), 400);  // the fuzzer's crash input (out_of_range.406)
  EXPECT_EQ(status_of(R"({"max_tokens": 1e999})"), 400);
  EXPECT_EQ(status_of(R"({"temperature": -1e400})"), 400);
  EXPECT_EQ(status_of(R"({"ok": 1})"), 200);
}

}  // namespace
