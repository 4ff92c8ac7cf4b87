// Shared fixtures for the runtime tests: a tiny random K3 checkpoint (tools/reference/gen_tiny.py,
// generated once per process into a temp dir) with a byte-level tiktoken.model (256 one-byte
// ranks, so the tokenizer's 512 ids match the tiny vocab_size 512), and the loaded model.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/threads.h"
#include "runtime/loaded_model.h"

namespace k3test {

/// The 256-line tiktoken.model whose rank i is the single byte i.
inline std::string byte_tiktoken_model() {
  static const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string s;
  for (int i = 0; i < 256; ++i) {
    s += b64[i >> 2];
    s += b64[(i & 3) << 4];
    s += "== " + std::to_string(i) + "\n";
  }
  return s;
}

/// Directory of the tiny checkpoint + byte tokenizer (created on first use, removed at exit).
inline const std::filesystem::path& tiny_model_dir() {
  struct Dir {
    std::filesystem::path p;
    Dir() {
      char tmpl[] = "/tmp/k3rt-XXXXXX";
      if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
      p = tmpl;
      const std::string cmd = std::string(K3_SOURCE_DIR) + "/.venv/bin/python " + K3_SOURCE_DIR +
                              "/tools/reference/gen_tiny.py --out " + p.string() + " --variant k3 --seed 1 > /dev/null";
      if (std::system(cmd.c_str()) != 0) throw std::runtime_error("gen_tiny.py failed: " + cmd);
      std::ofstream(p / "tiktoken.model") << byte_tiktoken_model();
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(p, ec);
    }
  };
  static const Dir d;
  return d.p;
}

/// The tiny model, loaded once per process: Fast kernels with the exact MXFP4 path (the int8
/// path's activation rounding is visible in the tiny random model's logits), one thread (the
/// suite runs tests in parallel on 2 cores).
inline const k3::LoadedModel& tiny() {
  static const k3::LoadedModel m = [] {
    k3::set_num_threads(1);
    k3::ModelOptions o;
    o.exec.kernels = k3::ModelKernels::Fast;
    o.exec.mxfp4 = k3::Mxfp4Path::ExactF32;
    return k3::LoadedModel::open(tiny_model_dir(), o);
  }();
  return m;
}

}  // namespace k3test
