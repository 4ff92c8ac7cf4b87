// The sequence-state API (model/sequence_state.h): reserve / release_unused, fork, mark_failed,
// the one rollback mechanism (StateLog from a decode-form forward or a snapshot), MLA rows by
// range, state_difference, and the state-file container (model/state_file.h) with malformed files.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/k3_model.h"
#include "model/sequence_state.h"
#include "model/state_file.h"
#include "state_file_test_util.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;

struct Tiny {
  std::unique_ptr<k3::Checkpoint> ck;
  std::unique_ptr<k3::Model> model;
  Tiny() {
    ck = k3::Checkpoint::open(k3test::tiny_checkpoint("k3", 1));
    model = std::make_unique<k3::Model>(*ck);
  }
  int64_t V() const { return model->config().vocab_size; }
};

Tiny& tiny() {
  static Tiny t;
  return t;
}

std::vector<int32_t> ids_of(int n, int vocab, int seed) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 131 + seed * 17 + 7) % vocab);
  return v;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const k3::Error& e) {
    return e.what();
  }
  return "(no error)";
}

using k3test::crc;
using k3test::read_all;
void write_all(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

fs::path temp_file(const std::string& name) {
  return fs::temp_directory_path() / ("k3-seqstate-" + std::to_string(::getpid()) + "-" + name);
}

TEST(SequenceState, ReserveAndReleaseUnusedKeepTheState) {
  const k3::Model& m = *tiny().model;
  const auto ids = ids_of(20, static_cast<int>(tiny().V()), 1);
  k3::SequenceState a = m.new_sequence(), b = m.new_sequence();
  a.reserve(64);
  const uint64_t fresh_bytes = b.bytes();
  EXPECT_EQ(a.bytes(), fresh_bytes);  // bytes() counts rows held, not capacity
  m.forward(a, ids, false);
  m.forward(b, ids, false);
  EXPECT_EQ(k3::state_difference(a, b), "");
  a.release_unused();
  EXPECT_EQ(k3::state_difference(a, b), "");
  EXPECT_EQ(a.bytes(), b.bytes());
  EXPECT_NE(error_of([&] { a.reserve(-1); }).find("reserve of -1 tokens"), std::string::npos);
}

TEST(SequenceState, ForkIsIndependent) {
  const k3::Model& m = *tiny().model;
  const auto ids = ids_of(12, static_cast<int>(tiny().V()), 2);
  k3::SequenceState a = m.new_sequence();
  m.forward(a, ids, false);
  const k3::SequenceState before = a.fork();
  k3::SequenceState f = a.fork();
  m.forward(f, std::span<const int32_t>(ids.data(), 3), false);
  EXPECT_EQ(k3::state_difference(a, before), "");
  EXPECT_EQ(f.n_past(), a.n_past() + 3);
  EXPECT_EQ(k3::state_difference(a, f), "n_past 12 vs 15");
}

TEST(SequenceState, MarkFailedIsRefused) {
  const k3::Model& m = *tiny().model;
  k3::SequenceState a = m.new_sequence();
  EXPECT_FALSE(a.failed());
  a.mark_failed();
  EXPECT_TRUE(a.failed());
  const std::vector<int32_t> one = {1};
  EXPECT_THROW(m.forward(a, one, false), k3::Error);
  EXPECT_THROW(a.save(temp_file("never.bin")), k3::Error);
}

// Rolling back to any point of a decode-form forward's log equals feeding only the kept tokens
// (in decode form), bit for bit; so does restoring a snapshot.
TEST(SequenceState, RollbackEqualsStateFedOnlyTheKeptTokens) {
  const k3::Model& m = *tiny().model;
  const auto prompt = ids_of(30, static_cast<int>(tiny().V()), 3);
  const auto win = ids_of(6, static_cast<int>(tiny().V()), 4);
  k3::SequenceState base = m.new_sequence();
  m.forward(base, prompt, false);
  for (int64_t keep = 1; keep <= static_cast<int64_t>(win.size()); ++keep) {
    k3::SequenceState a = base.fork();
    k3::StateLog log;
    k3::BatchEntry e{&a, win, k3::BatchLogits::All};
    e.per_token = true;
    e.kda_steps = &log;
    m.forward_batch(std::span<const k3::BatchEntry>(&e, 1));
    EXPECT_EQ(log.first(), base.n_past() + 1);
    EXPECT_EQ(log.points(), static_cast<int64_t>(win.size()));
    a.rollback_to(log, base.n_past() + keep);
    k3::SequenceState b = base.fork();
    for (int64_t t = 0; t < keep; ++t) m.forward(b, std::span<const int32_t>(&win[t], 1), false);
    EXPECT_EQ(k3::state_difference(a, b), "") << "keep " << keep;
  }
  // A snapshot is a log of one point: prefill past it, then come back.
  k3::SequenceState a = base.fork();
  const k3::StateLog snap = a.snapshot();
  EXPECT_EQ(snap.first(), base.n_past());
  EXPECT_EQ(snap.points(), 1);
  EXPECT_EQ(static_cast<int64_t>(snap.floats().size()), a.snapshot_floats());
  m.forward(a, win, false);
  a.rollback_to(snap, base.n_past());
  EXPECT_EQ(k3::state_difference(a, base), "");
  // Errors leave the state unchanged.
  m.forward(a, win, false);
  const k3::SequenceState held = a.fork();
  EXPECT_NE(error_of([&] { a.rollback_to(snap, base.n_past() + 1); }).find("not in the state log"), std::string::npos);
  EXPECT_NE(error_of([&] { a.rollback_to(k3::StateLog(), 0); }).find("empty"), std::string::npos);
  EXPECT_NE(error_of([&] { a.rollback_to(k3::StateLog(base.n_past(), 1, {1.0f}), base.n_past()); }).find("floats"),
            std::string::npos);
  const k3::StateLog later(a.n_past() + 1, 1, std::vector<float>(snap.floats().begin(), snap.floats().end()));
  EXPECT_NE(error_of([&] { a.rollback_to(later, a.n_past() + 1); }).find("past the state's"), std::string::npos);
  EXPECT_EQ(k3::state_difference(a, held), "");
}

// A state rebuilt from its MLA rows by range and a snapshot equals the original.
TEST(SequenceState, MlaRowsByRangeRebuildTheState) {
  const k3::Model& m = *tiny().model;
  const auto ids = ids_of(40, static_cast<int>(tiny().V()), 5);
  k3::SequenceState a = m.new_sequence();
  m.forward(a, ids, false);
  ASSERT_GT(a.mla_token_floats(), 0);
  std::vector<float> first, second;
  a.copy_mla_rows(0, 16, first);
  a.copy_mla_rows(16, 40, second);
  EXPECT_EQ(static_cast<int64_t>(first.size()), 16 * a.mla_token_floats());
  k3::SequenceState r = m.new_sequence();
  r.append_mla_rows(first, 16);
  r.append_mla_rows(second, 24);
  EXPECT_EQ(r.n_past(), 40);
  r.rollback_to(a.snapshot(), 40);
  EXPECT_EQ(k3::state_difference(r, a), "");
  std::vector<float> out;
  EXPECT_NE(error_of([&] { a.copy_mla_rows(10, 41, out); }).find("outside the state's 40 tokens"), std::string::npos);
  EXPECT_NE(error_of([&] { a.copy_mla_rows(5, 4, out); }).find("outside"), std::string::npos);
  EXPECT_NE(error_of([&] { r.append_mla_rows(first, 15); }).find("expected 15 x"), std::string::npos);
  EXPECT_EQ(r.n_past(), 40);
}

TEST(SequenceState, StateDifferenceNamesTheFirstDivergingLayerAndField) {
  const k3::Model& m = *tiny().model;
  k3::SequenceState a = m.new_sequence(), b = m.new_sequence();
  m.forward(a, ids_of(8, static_cast<int>(tiny().V()), 6), false);
  m.forward(b, ids_of(8, static_cast<int>(tiny().V()), 7), false);
  const std::string d = k3::state_difference(a, b);
  EXPECT_EQ(d.rfind("layer 0 ", 0), 0u) << d;  // the first layer already differs
  EXPECT_NE(d.find("element"), std::string::npos) << d;
  EXPECT_EQ(k3::state_difference(a, a.fork()), "");
}

// --- the container (model/state_file.h) -----------------------------------------------------

/// `file` with its header replaced by `edit(header)` and the CRC recomputed.
std::string with_header(const std::string& file, const std::function<void(nlohmann::ordered_json&)>& edit) {
  nlohmann::ordered_json h = nlohmann::ordered_json::parse(k3test::header_text(file));
  edit(h);
  return k3test::with_header_text(file, h.dump());
}

TEST(StateFile, RoundTripIsBitExact) {
  const k3::Model& m = *tiny().model;
  k3::SequenceState a = m.new_sequence();
  const auto ids = ids_of(21, static_cast<int>(tiny().V()), 8);
  m.forward(a, ids, false);
  const fs::path file = temp_file("roundtrip.bin");
  a.save(file, {"fp", ids, R"({"k": [1, 2]})"});
  k3::SequenceFileMeta meta;
  const k3::SequenceState b = k3::SequenceState::load(file, m.config(), &meta, "fp");
  EXPECT_EQ(k3::state_difference(a, b), "");
  EXPECT_EQ(meta.ids, ids);
  EXPECT_EQ(meta.extra_json, R"({"k":[1,2]})");
  fs::remove(file);
}

TEST(StateFile, MalformedFilesAreRefusedNamingTheFile) {
  const k3::Model& m = *tiny().model;
  k3::SequenceState a = m.new_sequence();
  m.forward(a, ids_of(5, static_cast<int>(tiny().V()), 9), false);
  const fs::path file = temp_file("malformed.bin");
  a.save(file);
  const std::string good = read_all(file);
  auto load_error = [&](const std::string& bytes) {
    write_all(file, bytes);
    return error_of([&] { (void)k3::SequenceState::load(file, m.config()); });
  };
  auto expect_error = [&](const std::string& bytes, const std::string& part) {
    const std::string e = load_error(bytes);
    EXPECT_NE(e.find(file.string()), std::string::npos) << e;
    EXPECT_NE(e.find(part), std::string::npos) << e;
  };
  expect_error("not a state", "bad magic \"not a st\", expected \"K3SEQST1\"");
  expect_error("K3", "bad magic (file shorter than 8 bytes)");
  // Another kind of k3 file, and the older prefix-block layout, are named.
  expect_error("K3PCBLK2" + good.substr(8),
               "found \"K3PCBLK2\", a k3 prefix-cache block (format 2); expected \"K3SEQST1\"");
  expect_error("K3PCBLK1" + good.substr(8), "found \"K3PCBLK1\", a k3 prefix-cache block of format 1");
  // An older header version (CRC valid).
  expect_error(with_header(good, [](nlohmann::ordered_json& h) { h["version"] = 1; }),
               "format version 1, this k3 reads version 2");
  // Truncated: the header length runs past the end, or the CRC no longer matches.
  expect_error(good.substr(0, 12), "bad header length");
  expect_error(good.substr(0, good.size() - 9), "CRC-32 mismatch");
  std::string big = good;
  const uint64_t huge = 1ull << 40;
  std::memcpy(big.data() + 8, &huge, 8);
  expect_error(big, "bad header length");
  // One flipped payload bit.
  std::string flipped = good;
  flipped[flipped.size() - 10] ^= 1;
  expect_error(flipped, "CRC-32 mismatch");
  // A valid CRC over a header that describes more or fewer floats than the payload holds.
  expect_error(with_header(good, [](nlohmann::ordered_json& h) { h["n_past"] = 6; }), "cache_shape");
  std::string extra = good.substr(0, good.size() - 4) + std::string(8, '\0');
  const uint32_t c = crc(extra);
  extra.append(reinterpret_cast<const char*>(&c), 4);
  expect_error(extra, "8 payload bytes past the layers its header describes");
  // Deep JSON in the header (a shallow "extra" loads).
  EXPECT_EQ(load_error(with_header(good, [](nlohmann::ordered_json& h) { h["extra"] = "@"; })), "(no error)");
  std::string deep(100, '[');
  deep += std::string(100, ']');
  std::string hs_file = with_header(good, [](nlohmann::ordered_json& h) { h["extra"] = "@X@"; });
  const size_t at = hs_file.find("\"@X@\"");
  ASSERT_NE(at, std::string::npos);
  // Rebuild with the deep text in place of the marker (header length and CRC recomputed).
  uint64_t n = 0;
  std::memcpy(&n, hs_file.data() + 8, 8);
  std::string hs = hs_file.substr(16, n);
  hs.replace(hs.find("\"@X@\""), 5, deep);
  const uint64_t nn = hs.size();
  std::string deep_file = hs_file.substr(0, 8);
  deep_file.append(reinterpret_cast<const char*>(&nn), 8);
  deep_file += hs + hs_file.substr(16 + n, hs_file.size() - 16 - n - 4);
  const uint32_t dc = crc(deep_file);
  deep_file.append(reinterpret_cast<const char*>(&dc), 4);
  expect_error(deep_file, "JSON nested deeper than 64 levels (in the value of key \"extra\")");
  fs::remove(file);
}

TEST(StateFile, ContainerWriteParseRoundTrip) {
  const fs::path file = temp_file("container.bin");
  const std::vector<float> a = {1.5f, -2.0f}, b = {3.25f};
  const std::span<const std::byte> parts[] = {std::as_bytes(std::span<const float>(a)),
                                              std::as_bytes(std::span<const float>(b))};
  k3::write_state_file(file, k3::kPrefixBlockFile, R"({"format":"x"})", parts, "test", false);
  const std::string bytes = read_all(file);
  EXPECT_EQ(bytes.size(), k3::state_file_bytes(14, 12));
  EXPECT_EQ(bytes.substr(0, 8), "K3PCBLK2");
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const k3::StateFileView v = k3::parse_state_file(std::span(p, bytes.size()), k3::kPrefixBlockFile, "f", "test");
  EXPECT_EQ(v.header, R"({"format":"x"})");
  ASSERT_EQ(v.payload.size(), 12u);
  float back[3];
  std::memcpy(back, v.payload.data(), 12);
  EXPECT_EQ(back[0], 1.5f);
  EXPECT_EQ(back[2], 3.25f);
  // The header bound of the caller is enforced.
  EXPECT_NE(error_of([&] {
              (void)k3::parse_state_file(std::span(p, bytes.size()), k3::kPrefixBlockFile, "f", "test", 10);
            }).find("bad header length"),
            std::string::npos);
  fs::remove(file);
}

}  // namespace
