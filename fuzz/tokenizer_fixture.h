// A small synthetic tiktoken vocabulary for the tokenizer fuzz targets (no files needed):
// the 256 single bytes plus merges over ASCII and some UTF-8 fragments.
#pragma once
#include <string>

#include "tokenizer/tokenizer.h"

namespace k3fuzz {

inline std::string b64(const std::string& s) {
  static const char* A = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string o;
  std::size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    const unsigned x = (unsigned(uint8_t(s[i])) << 16) | (unsigned(uint8_t(s[i + 1])) << 8) | uint8_t(s[i + 2]);
    o += A[x >> 18];
    o += A[(x >> 12) & 63];
    o += A[(x >> 6) & 63];
    o += A[x & 63];
  }
  if (s.size() - i == 1) {
    const unsigned x = unsigned(uint8_t(s[i])) << 16;
    o += A[x >> 18];
    o += A[(x >> 12) & 63];
    o += "==";
  } else if (s.size() - i == 2) {
    const unsigned x = (unsigned(uint8_t(s[i])) << 16) | (unsigned(uint8_t(s[i + 1])) << 8);
    o += A[x >> 18];
    o += A[(x >> 12) & 63];
    o += A[(x >> 6) & 63];
    o += '=';
  }
  return o;
}

inline std::string tiny_model_text() {
  std::string m;
  int r = 0;
  for (int c = 0; c < 256; ++c) m += b64(std::string(1, char(c))) + " " + std::to_string(r++) + "\n";
  const char* merges[] = {"  ",       " a",           "he",    "ll",  "hell",  "hello",    " t",
                          "th",       "the",          "in",    "ing", "\r\n",  "\xE4\xBD", "\xE4\xBD\xA0",
                          "\xF0\x9F", "\xF0\x9F\x98", "12",    "123", "<|",    "|>",       "'s",
                          "    ",     "message",      " role", "=\"", "think", "response"};
  for (const char* s : merges) m += b64(s) + " " + std::to_string(r++) + "\n";
  return m;
}

inline const k3::Tokenizer& tiny() {
  static const k3::Tokenizer t = k3::Tokenizer::from_strings(tiny_model_text(), "", "tiny");
  return t;
}

}  // namespace k3fuzz
