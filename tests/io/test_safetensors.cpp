// Safetensors header parsing: valid files and one test per malformed case (io/safetensors.h).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "checkpoint_writer.h"
#include "core/error.h"
#include "io/safetensors.h"

using namespace k3;
using k3test::TempDir;

namespace {

std::vector<uint8_t> make_file(const std::string& header, uint64_t data_bytes, int64_t header_len = -1) {
  std::vector<uint8_t> b(8);
  const uint64_t n = header_len < 0 ? header.size() : static_cast<uint64_t>(header_len);
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  b.insert(b.end(), header.begin(), header.end());
  b.resize(b.size() + data_bytes, 0);
  return b;
}

std::string error_of(const std::vector<uint8_t>& f) {
  try {
    parse_safetensors(f, "t.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_ERR(file, text) EXPECT_NE(error_of(file).find(text), std::string::npos) << error_of(file)

}  // namespace

TEST(Safetensors, ParsesValidHeaderWithMetadata) {
  auto f = make_file(
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2,3],"data_offsets":[4,28]},)"
      R"("a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"z":{"dtype":"U8","shape":[0],"data_offsets":[28,28]}})",
      28);
  auto h = parse_safetensors(f, "t");
  ASSERT_EQ(h.entries.size(), 3u);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.entries[0].name, "a");
  EXPECT_EQ(h.entries[0].dtype, DType::BF16);
  EXPECT_EQ(h.entries[0].offset, h.data_start);
  EXPECT_EQ(h.entries[1].name, "b");
  EXPECT_EQ(h.entries[1].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h.entries[1].offset, h.data_start + 4);
  EXPECT_EQ(h.entries[1].nbytes, 24u);
  EXPECT_EQ(h.entries[2].nbytes, 0u);
  EXPECT_EQ(h.data_start, 8 + h.header_len);
}

TEST(Safetensors, AllTwelveDtypes) {
  const char* names[] = {"BF16", "F16", "F32", "F64", "I8", "U8", "I16", "I32", "I64", "BOOL", "F8_E4M3", "F8_E5M2"};
  const int sizes[] = {2, 2, 4, 8, 1, 1, 2, 4, 8, 1, 1, 1};
  for (int i = 0; i < 12; ++i) {
    std::string h = std::string(R"({"t":{"dtype":")") + names[i] + R"(","shape":[3],"data_offsets":[0,)" +
                    std::to_string(3 * sizes[i]) + "]}}";
    auto p = parse_safetensors(make_file(h, static_cast<uint64_t>(3 * sizes[i])), "t");
    EXPECT_EQ(dtype_name(p.entries.at(0).dtype), names[i]);
  }
}

TEST(Safetensors, TruncatedHeaderLength) {
  std::vector<uint8_t> f = {1, 2, 3};
  EXPECT_ERR(f, "truncated safetensors file: 3 bytes, need at least 8");
}

TEST(Safetensors, HeaderLengthExceedsFile) {
  EXPECT_ERR(make_file("{}", 0, 1000), "header length 1000 exceeds file size - 8 = 2");
}

TEST(Safetensors, HeaderLengthOver100MB) {
  // A sparse 100 MB + 16 byte file whose header length claims 100 MB + 1.
  TempDir d;
  auto path = d.path() / "big.safetensors";
  k3test::write_raw_safetensors(path, "{}", 0, 100'000'001);
  std::filesystem::resize_file(path, 100'000'016);
  try {
    SafetensorsFile f(path);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("header length 100000001 exceeds the limit of 100000000"), std::string::npos)
        << e.what();
  }
}

TEST(Safetensors, InvalidJson) { EXPECT_ERR(make_file(R"({"a": {"dtype": )", 0), "invalid JSON"); }

TEST(Safetensors, HeaderNotObject) { EXPECT_ERR(make_file("[1,2]", 0), "must be a JSON object, found array"); }

TEST(Safetensors, UnknownDtype) {
  EXPECT_ERR(make_file(R"({"w":{"dtype":"Q4_K","shape":[1],"data_offsets":[0,1]}})", 1),
             "tensor 'w': unknown dtype \"Q4_K\"");
}

TEST(Safetensors, ShapeBytesMismatch) {
  EXPECT_ERR(make_file(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 12),
             "tensor 'w': shape/bytes mismatch: F32 shape [2,2] needs 16 bytes but data_offsets span 12");
}

TEST(Safetensors, NegativeShape) {
  EXPECT_ERR(make_file(R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", 0),
             "shape[0] must be a non-negative integer, found -1");
}

TEST(Safetensors, ShapeOverflow) {
  EXPECT_ERR(make_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0),
             "byte count overflows 64 bits");
}

TEST(Safetensors, SpanOutsideFile) {
  EXPECT_ERR(make_file(R"({"w":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})", 8),
             "data_offsets [4, 12) outside the data region of 8 bytes");
}

TEST(Safetensors, BeginAfterEnd) {
  EXPECT_ERR(make_file(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}})", 8), "begin 4 > end 2");
}

TEST(Safetensors, OverlappingSpans) {
  EXPECT_ERR(make_file(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}})",
                       10),
             "tensors 'a' and 'b' overlap (data_offsets [0, 8) and [6, 10))");
}

TEST(Safetensors, DuplicateName) {
  EXPECT_ERR(make_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                       2),
             "duplicate key 'a'");
}

TEST(Safetensors, MetadataMustBeStrings) {
  EXPECT_ERR(make_file(R"({"__metadata__":{"n":3}})", 0), "\"__metadata__\"[\"n\"] must be a string, found integer");
}

TEST(Safetensors, MissingFields) {
  EXPECT_ERR(make_file(R"({"w":{"shape":[1],"data_offsets":[0,1]}})", 1), "tensor 'w': missing \"dtype\"");
  EXPECT_ERR(make_file(R"({"w":{"dtype":"U8","data_offsets":[0,1]}})", 1), "tensor 'w': missing \"shape\"");
  EXPECT_ERR(make_file(R"({"w":{"dtype":"U8","shape":[1]}})", 1), "tensor 'w': missing \"data_offsets\"");
  EXPECT_ERR(make_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", 1), "must be [begin, end]");
}

TEST(Safetensors, InvalidUtf8InHeader) {
  std::string h = "{\"w\xff\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}";
  EXPECT_ERR(make_file(h, 0), "invalid JSON");
}

TEST(Safetensors, MappedFileReadsWrittenFile) {
  TempDir d;
  k3test::FxTensor t{"x", DType::F32, {2}, {}};
  float v[2] = {1.5f, -2.0f};
  t.data.resize(8);
  std::memcpy(t.data.data(), v, 8);
  k3test::write_safetensors(d.path() / "a.safetensors", {t});
  SafetensorsFile f(d.path() / "a.safetensors");
  ASSERT_EQ(f.header().entries.size(), 1u);
  float r[2];
  std::memcpy(r, f.data(f.header().entries[0]), 8);
  EXPECT_EQ(r[0], 1.5f);
  EXPECT_EQ(r[1], -2.0f);
  EXPECT_EQ(f.header().header_len % 8, 0u);
}

TEST(Safetensors, MissingFileNamesPath) {
  try {
    SafetensorsFile f("/nonexistent/k3/x.safetensors");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/k3/x.safetensors: cannot open"), std::string::npos);
  }
}
