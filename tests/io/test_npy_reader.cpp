// The .npy reader (io/npy_reader.h) on well-formed files and on malformed headers: every
// malformed input is a k3::Error naming the input, never a crash or an over-read.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/npy_reader.h"

using namespace k3;

namespace {

std::string npy(const std::string& dict, const std::string& data, int major = 1) {
  std::string h = dict;
  const size_t pre = major == 1 ? 10 : 12;
  while ((pre + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  std::string out = std::string("\x93NUMPY", 6) + static_cast<char>(major) + '\0';
  if (major == 1) {
    out += static_cast<char>(h.size() & 0xff);
    out += static_cast<char>(h.size() >> 8);
  } else {
    for (int i = 0; i < 4; ++i) out += static_cast<char>((h.size() >> (8 * i)) & 0xff);
  }
  return out + h + data;
}

std::string floats(std::vector<float> v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }

std::string error_of(const std::string& bytes) {
  try {
    parse_npy(bytes, "--patches 'x.npy'");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(NpyReader, ReadsFloat32AndFloat64) {
  const NpyArray a = parse_npy(
      npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", floats({1, 2, 3, 4, 5, -6.5f})), "a");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.data, (std::vector<float>{1, 2, 3, 4, 5, -6.5f}));
  const double d[2] = {0.1, -3.0};
  const NpyArray b = parse_npy(npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }",
                                   std::string(reinterpret_cast<const char*>(d), 16), 2),
                               "b");
  EXPECT_EQ(b.shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(b.data, (std::vector<float>{0.1f, -3.0f}));
  const NpyArray s = parse_npy(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", floats({7})), "s");
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.data, std::vector<float>{7});
}

TEST(NpyReader, MalformedInputsAreNamedErrors) {
  const std::string ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
  const std::pair<std::string, std::string> cases[] = {
      {"", "not an .npy file"},
      {"\x93NUMPX\x01\x00\x10\x00", "not an .npy file"},
      {std::string("\x93NUMPY\x07\x00\x00\x00", 10), "format version 7 is not supported"},
      {std::string("\x93NUMPY\x01\x00\xff\x7f", 10) + "{", "runs past the end"},
      {npy("'descr': '<f4'", floats({1, 2, 3, 4})), "malformed .npy header (expected a dict"},
      {npy("{'descr': '<f4', 'shape': (2, 2), }", floats({1, 2, 3, 4})), "needs descr, fortran_order and shape"},
      {npy("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }", floats({1, 2, 3, 4})),
       "dtype '<i4' is not supported"},
      {npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", floats({1, 2, 3, 4})),
       "dtype '>f4' is not supported"},
      {npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", floats({1, 2, 3, 4})), "Fortran order"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -2), }", floats({1, 2, 3, 4})),
       "malformed .npy shape"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': 4, }", floats({1, 2, 3, 4})), "malformed .npy shape"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", floats({1, 2, 3, 4})),
       "malformed .npy shape"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999), }", floats({1})),
       "too large"},
      {npy(ok, floats({1, 2, 3})), "data is 12 bytes, shape (2, 2) of '<f4' needs 16"},
      {npy(ok, floats({1, 2, 3, 4, 5})), "data is 20 bytes"},
  };
  for (const auto& [bytes, needle] : cases) {
    const std::string e = error_of(bytes);
    EXPECT_EQ(e.rfind("--patches 'x.npy': ", 0), 0u) << e;
    EXPECT_NE(e.find(needle), std::string::npos) << "want '" << needle << "' in: " << e;
  }
  // every truncation of a valid file is refused
  const std::string good = npy(ok, floats({1, 2, 3, 4}));
  for (size_t n = 0; n < good.size(); ++n) EXPECT_NE(error_of(good.substr(0, n)), "(no error)") << n;
}
