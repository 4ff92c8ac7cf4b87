#include "io/tensor_check.h"

#include <cmath>
#include <cstring>

namespace k3 {

namespace {

bool ends_with(const std::string& s, const char* suf) {
  const std::size_t n = std::strlen(suf);
  return s.size() >= n && s.compare(s.size() - n, n, suf) == 0;
}

void note(TensorScan& r, uint64_t i) {
  if (r.first_bad < 0) r.first_bad = static_cast<int64_t>(i);
}

}  // namespace

TensorScan scan_tensor(const TensorView& t) {
  TensorScan r;
  const uint8_t* p = t.data;
  if (!p) return r;
  switch (t.dtype) {
    case DType::F32: {
      r.scanned = true;
      const uint64_t n = t.nbytes / 4;
      for (uint64_t i = 0; i < n; ++i) {
        uint32_t u;
        std::memcpy(&u, p + i * 4, 4);
        if ((u & 0x7f800000u) == 0x7f800000u) {
          ((u & 0x007fffffu) ? r.n_nan : r.n_inf)++;
          note(r, i);
        }
      }
      break;
    }
    case DType::BF16:
    case DType::F16: {
      r.scanned = true;
      const uint16_t exp = t.dtype == DType::BF16 ? 0x7f80 : 0x7c00;
      const uint16_t man = t.dtype == DType::BF16 ? 0x007f : 0x03ff;
      const uint64_t n = t.nbytes / 2;
      for (uint64_t i = 0; i < n; ++i) {
        const uint16_t h = static_cast<uint16_t>(p[i * 2] | (p[i * 2 + 1] << 8));
        if ((h & exp) == exp) {
          ((h & man) ? r.n_nan : r.n_inf)++;
          note(r, i);
        }
      }
      break;
    }
    case DType::F64: {
      r.scanned = true;
      const uint64_t n = t.nbytes / 8;
      for (uint64_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, p + i * 8, 8);
        if (!std::isfinite(d)) {
          (std::isnan(d) ? r.n_nan : r.n_inf)++;
          note(r, i);
        }
      }
      break;
    }
    case DType::U8:
      if (ends_with(t.name, ".weight_scale")) {
        r.scanned = true;
        for (uint64_t i = 0; i < t.nbytes; ++i) {
          if (p[i] == 0xFF) {
            ++r.n_nan;
            note(r, i);
          } else if (p[i] > kMaxPlausibleE8M0) {
            ++r.n_huge_scale;
            note(r, i);
          }
        }
      }
      break;
    default: break;
  }
  return r;
}

std::string TensorScan::describe(const TensorView& t) const {
  if (ok()) return "";
  std::string s;
  auto add = [&](uint64_t n, const char* what) {
    if (!n) return;
    if (!s.empty()) s += ", ";
    s += std::to_string(n) + " " + what;
  };
  const bool scale = t.dtype == DType::U8;
  add(n_nan, scale ? "NaN scale bytes (0xFF)" : "NaN");
  add(n_inf, "Inf");
  add(n_huge_scale, "implausible scale bytes (> 0xBF, i.e. 2^65 or more)");
  s += ", first at element " + std::to_string(first_bad);
  if (t.shape.size() >= 2 && first_bad >= 0) {
    int64_t rest = first_bad;
    std::string idx;
    for (std::size_t d = t.shape.size(); d-- > 0;) {
      const int64_t dim = t.shape[d] > 0 ? t.shape[d] : 1;
      idx = std::to_string(rest % dim) + (idx.empty() ? "" : ", ") + idx;
      rest /= dim;
    }
    s += " (index [" + idx + "])";
  }
  return s;
}

}  // namespace k3
