// Deep JSON in state files: a sequence-state file whose header nests 50,000 levels in "extra"
// (k3 run/chat --state-load, POST /slots restore) and a prefix-cache disk block whose header
// does, are refused with an error naming the file and key (a miss for the cache), never a
// stack overflow. The header parser alone: tests of model/state_header.h.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json_depth.h"
#include "model/state_header.h"
#include "runtime/prefix_cache_disk.h"
#include "../model/state_file_test_util.h"
#include "runtime_test_util.h"

namespace {

namespace fs = std::filesystem;

std::string nested(int depth) {
  return std::string(static_cast<std::size_t>(depth), '[') + std::string(static_cast<std::size_t>(depth), ']');
}

using k3test::crc;
using k3test::read_all;

void write_all(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(s.data(), static_cast<std::streamsize>(s.size()));
}

// A sequence-state file (magic, u64 header length, header, payload, CRC-32) with its header's
// "extra" replaced by `extra_text`, the CRC recomputed: a file valid in every other respect.
std::string with_extra(const std::string& file, const std::string& extra_text) {
  nlohmann::ordered_json h = nlohmann::ordered_json::parse(k3test::header_text(file));
  h["extra"] = "@EXTRA@";
  std::string hs = h.dump();
  hs.replace(hs.find("\"@EXTRA@\""), 9, extra_text);
  return k3test::with_header_text(file, hs);
}

TEST(DeepJsonState, F12StateFileWithDeepExtraIsAnErrorNamingFileAndKey) {
  const k3::Model& m = *k3test::tiny().model;
  auto seq = m.new_sequence();
  const std::vector<int32_t> ids = {1, 2, 3};
  m.forward(seq, ids, false);
  const fs::path file = fs::temp_directory_path() / ("k3-deep-state-" + std::to_string(::getpid()) + ".bin");
  seq.save(file, k3::SequenceFileMeta{"fp", ids, R"({"messages": []})"});
  const std::string good = read_all(file);
  // The file as written loads, and so does one whose extra nests to the header's limit.
  k3::SequenceFileMeta meta;
  EXPECT_EQ(k3::SequenceState::load(file, m.config(), &meta).n_past(), 3);
  write_all(file, with_extra(good, nested(k3::kMaxJsonDepth - 1)));
  EXPECT_EQ(k3::SequenceState::load(file, m.config(), &meta).n_past(), 3);
  EXPECT_EQ(meta.extra_json, nested(k3::kMaxJsonDepth - 1));
  // The attack: 50,000 levels (and one level too many).
  for (int depth : {50000, k3::kMaxJsonDepth}) {
    write_all(file, with_extra(good, nested(depth)));
    try {
      (void)k3::SequenceState::load(file, m.config(), &meta);
      ADD_FAILURE() << "accepted depth " << depth;
    } catch (const k3::Error& e) {
      EXPECT_EQ(std::string(e.what()),
                "sequence state '" + file.string() +
                    "': header: JSON nested deeper than 64 levels (in the value of key \"extra\")");
    }
  }
  // save() refuses extra metadata the loader would refuse.
  EXPECT_THROW(seq.save(file, k3::SequenceFileMeta{"fp", ids, nested(k3::kMaxJsonDepth)}), k3::Error);
  EXPECT_NO_THROW(seq.save(file, k3::SequenceFileMeta{"fp", ids, nested(k3::kMaxJsonDepth - 1)}));
  EXPECT_NO_THROW(k3::SequenceState::load(file, m.config()));
  fs::remove(file);
}

TEST(DeepJsonState, HeaderParserChecksFormAndDepth) {
  const std::string ok = R"({"format": "k3-sequence-state", "version": 2, "n_past": 2, "model_fingerprint": "fp",
                             "ids": [4, 5], "extra": {"a": [1]}, "layers": []})";
  const k3::SequenceStateHeader h = k3::parse_sequence_state_header(ok, "f.bin");
  EXPECT_EQ(h.n_past, 2);
  EXPECT_EQ(h.fingerprint, "fp");
  EXPECT_EQ(h.ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(h.extra_json, R"({"a":[1]})");
  EXPECT_TRUE(h.layers.is_array());
  auto err = [](const std::string& text) {
    try {
      (void)k3::parse_sequence_state_header(text, "f.bin");
    } catch (const k3::Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(err(R"({"extra": )" + nested(50000) + "}"),
            "sequence state 'f.bin': header: JSON nested deeper than 64 levels (in the value of key \"extra\")");
  EXPECT_EQ(err(R"({"layers": )" + nested(65) + "}"),
            "sequence state 'f.bin': header: JSON nested deeper than 64 levels (in the value of key \"layers\")");
  EXPECT_NE(err("{").find("header is not JSON"), std::string::npos);
  EXPECT_NE(err("[]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(err(R"({"format": "x"})").find("expected format"), std::string::npos);
  EXPECT_NE(err(R"({"format": "k3-sequence-state", "version": 1})").find("format version 1"), std::string::npos);
  EXPECT_NE(err(R"({"format": "k3-sequence-state", "version": 2})").find("malformed header"), std::string::npos);
}

TEST(DeepJsonState, PrefixCacheBlockWithDeepHeaderIsAMiss) {
  const fs::path dir = fs::temp_directory_path() / ("k3-deep-pc-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const uint64_t key = 0x1234;
  {
    k3::PrefixCacheDisk d(dir, 1 << 20, "fp", 2);
    k3::DiskBlock b;
    b.key = key;
    b.ids = {7, 8};
    b.mla = {1.0f, 2.0f};
    d.write(b);
  }
  fs::path file;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".k3pc") file = e.path();
  ASSERT_FALSE(file.empty());
  const std::string good = read_all(file);
  {
    k3::PrefixCacheDisk d(dir, 1 << 20, "fp", 2);
    ASSERT_TRUE(d.read(key, 2, 0).has_value());
  }
  // Same block, its header given a 50,000-deep extra field, CRC recomputed.
  uint64_t hl = 0;
  std::memcpy(&hl, good.data() + 8, 8);
  std::string hs = good.substr(16, hl);
  hs.insert(hs.size() - 1, ",\"x\":" + nested(50000));
  const uint64_t nhl = hs.size();
  std::string bad = good.substr(0, 8);
  bad.append(reinterpret_cast<const char*>(&nhl), 8);
  bad += hs;
  bad += good.substr(16 + hl, good.size() - 16 - hl - 4);
  const uint32_t c = crc(bad);
  bad.append(reinterpret_cast<const char*>(&c), 4);
  write_all(file, bad);
  {
    k3::PrefixCacheDisk d(dir, 1 << 20, "fp", 2);
    EXPECT_FALSE(d.read(key, 2, 0).has_value());
    EXPECT_EQ(d.rejected(), 1u);
    EXPECT_FALSE(fs::exists(file));  // a bad file is removed
  }
  fs::remove_all(dir);
}

}  // namespace
