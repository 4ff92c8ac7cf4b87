// Shared helpers for the tokenizer tests: data paths, file reading, the real Kimi tokenizer
// (loaded once per process from K3_SHARED_DIR/data/kimi-tokenizer/tiktoken.model).
#pragma once
#include <fstream>
#include <sstream>
#include <string>

#include "tokenizer/tokenizer.h"

namespace k3test {

inline std::string data_dir() { return std::string(K3_SHARED_DIR) + "/data/kimi-tokenizer"; }

inline std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// The real K3 tokenizer (no tokenizer_config.json ships in the data folder: K3 default table).
inline const k3::Tokenizer& kimi() {
  static const k3::Tokenizer t = k3::Tokenizer::from_files(data_dir() + "/tiktoken.model");
  return t;
}

}  // namespace k3test
