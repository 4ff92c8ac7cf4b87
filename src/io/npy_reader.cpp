#include "io/npy_reader.h"

#include <cstring>

#include "core/checked_math.h"
#include "core/error.h"

namespace k3 {

namespace {

// The value of `key` in the header dict: the text after "'key':" up to the next top-level ',' or
// '}' (a tuple's commas stay inside it). Empty when absent.
std::string_view dict_value(std::string_view h, std::string_view key) {
  const std::string quoted = "'" + std::string(key) + "'";
  const size_t k = h.find(quoted);
  if (k == std::string_view::npos) return {};
  size_t i = h.find(':', k + quoted.size());
  if (i == std::string_view::npos) return {};
  ++i;
  while (i < h.size() && h[i] == ' ') ++i;
  size_t j = i;
  int depth = 0;
  for (; j < h.size(); ++j) {
    const char ch = h[j];
    if (ch == '(') ++depth;
    else if (ch == ')') --depth;
    else if ((ch == ',' || ch == '}') && depth == 0) break;
  }
  std::string_view v = h.substr(i, j - i);
  while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
  return v;
}

}  // namespace

NpyArray parse_npy(std::string_view b, const std::string& what) {
  if (b.size() < 10 || std::memcmp(b.data(), "\x93NUMPY", 6) != 0)
    throw Error(what + ": not an .npy file (expected the magic string \\x93NUMPY)");
  const int major = static_cast<unsigned char>(b[6]);
  size_t hlen = 0, start = 0;
  if (major == 1) {
    hlen = static_cast<unsigned char>(b[8]) | (static_cast<size_t>(static_cast<unsigned char>(b[9])) << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) throw Error(what + ": truncated .npy header");
    hlen = 0;
    for (int i = 0; i < 4; ++i) hlen |= static_cast<size_t>(static_cast<unsigned char>(b[8 + i])) << (8 * i);
    start = 12;
  } else {
    throw Error(what + ": .npy format version " + std::to_string(major) + " is not supported (1, 2 or 3)");
  }
  if (hlen > b.size() - start)
    throw Error(what + ": .npy header of " + std::to_string(hlen) + " bytes runs past the end of the file");
  const std::string_view h = b.substr(start, hlen);
  if (h.empty() || h.front() != '{' || h.find('}') == std::string_view::npos)
    throw Error(what + ": malformed .npy header (expected a dict {...})");
  const std::string_view descr = dict_value(h, "descr"), fortran = dict_value(h, "fortran_order"),
                         shape = dict_value(h, "shape");
  if (descr.empty() || fortran.empty() || shape.empty())
    throw Error(what + ": malformed .npy header (needs descr, fortran_order and shape): " + std::string(h));
  size_t item = 0;
  if (descr == "'<f4'") item = 4;
  else if (descr == "'<f8'") item = 8;
  else throw Error(what + ": .npy dtype " + std::string(descr) + " is not supported (expected '<f4' float32 or '<f8')");
  if (fortran != "False") throw Error(what + ": .npy array in Fortran order is not supported (expected C order)");
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')')
    throw Error(what + ": malformed .npy shape " + std::string(shape));
  NpyArray a;
  uint64_t numel = 1;
  std::string_view s = shape.substr(1, shape.size() - 2);
  while (true) {
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    if (s.empty()) break;
    uint64_t v = 0;
    size_t n = 0;
    while (n < s.size() && s[n] >= '0' && s[n] <= '9') {
      if (v > (uint64_t{1} << 40)) throw Error(what + ": .npy dimension too large in " + std::string(shape));
      v = v * 10 + static_cast<uint64_t>(s[n] - '0');
      ++n;
    }
    if (n == 0) throw Error(what + ": malformed .npy shape " + std::string(shape));
    a.shape.push_back(static_cast<int64_t>(v));
    const auto m = checked_mul(numel, v);
    if (!m || *m > (uint64_t{1} << 40)) throw Error(what + ": .npy shape " + std::string(shape) + " is too large");
    numel = *m;
    s.remove_prefix(n);
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    if (!s.empty() && s.front() == ',') s.remove_prefix(1);
    else if (!s.empty()) throw Error(what + ": malformed .npy shape " + std::string(shape));
  }
  const size_t data_off = start + hlen;
  const uint64_t want = numel * item;
  if (b.size() - data_off != want)
    throw Error(what + ": .npy data is " + std::to_string(b.size() - data_off) + " bytes, shape " + std::string(shape) +
                " of " + std::string(descr) + " needs " + std::to_string(want));
  a.data.resize(static_cast<size_t>(numel));
  const char* p = b.data() + data_off;
  if (item == 4) {
    std::memcpy(a.data.data(), p, static_cast<size_t>(want));
  } else {
    for (size_t i = 0; i < a.data.size(); ++i) {
      double d;
      std::memcpy(&d, p + 8 * i, 8);
      a.data[i] = static_cast<float>(d);
    }
  }
  return a;
}

NpyArray read_npy(const std::string& path, const std::string& what, const ReadLimits& limits) {
  const std::string bytes = read_file_bounded(path, what, limits);
  return parse_npy(bytes, what + " '" + path + "'");
}

}  // namespace k3
