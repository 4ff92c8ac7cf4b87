// Deep JSON in checkpoint and tokenizer files: config.json, a safetensors header and
// tokenizer_config.json nested deeper than kMaxJsonDepth (core/json_depth.h) are a k3::Error
// naming the file and the key, refused before parsing (values are printed in error messages by
// nlohmann's recursive dump()).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "tokenizer/vocab.h"

namespace {

std::string nested(int depth) {
  return std::string(static_cast<std::size_t>(depth), '[') + std::string(static_cast<std::size_t>(depth), ']');
}

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const k3::Error& e) {
    return e.what();
  }
  return "accepted";
}

TEST(DeepJson, ConfigJsonIsRefusedNamingFileAndKey) {
  const std::string text = R"({"model_type": "kimi_k3", "hidden_size": )" + nested(50000) + "}";
  EXPECT_EQ(error_of([&] { (void)k3::parse_config(text, "cfg.json"); }),
            "cfg.json: JSON nested deeper than 64 levels (in the value of key \"hidden_size\")");
  // At the limit the text parses and the key's own check names it.
  const std::string w = error_of([&] { (void)k3::parse_config(R"({"hidden_size": )" + nested(63) + "}", "cfg.json"); });
  EXPECT_EQ(w.find("nested deeper"), std::string::npos) << w;
  EXPECT_NE(w.find("cfg.json"), std::string::npos) << w;
}

TEST(DeepJson, SafetensorsHeaderIsRefused) {
  const std::string header = R"({"__metadata__": {"x": )" + nested(50000) + "}}";
  std::vector<uint8_t> bytes(8 + header.size());
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  const std::string w =
      error_of([&] { (void)k3::parse_safetensors(std::span<const uint8_t>(bytes), "m.safetensors"); });
  EXPECT_NE(w.find("m.safetensors"), std::string::npos) << w;
  EXPECT_NE(w.find("JSON nested deeper than 64 levels (in the value of key \"__metadata__\")"), std::string::npos) << w;
}

TEST(DeepJson, TokenizerConfigIsRefused) {
  const std::string text = R"({"added_tokens_decoder": )" + nested(50000) + "}";
  EXPECT_EQ(error_of([&] { (void)k3::tok::specials_from_config(text, 256, "tokenizer_config.json"); }),
            "tokenizer_config.json: JSON nested deeper than 64 levels (in the value of key \"added_tokens_decoder\")");
}

}  // namespace
