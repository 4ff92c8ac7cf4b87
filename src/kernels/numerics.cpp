#include "kernels/numerics.h"

#include <string>

#include "core/error.h"

namespace k3 {

const char* numerics_name(Numerics n) {
  switch (n) {
    case Numerics::Exact: return "exact";
    case Numerics::Mxfp8: return "mxfp8";
    case Numerics::Bf16: return "bf16";
    case Numerics::Int8: return "int8";
  }
  return "?";
}

Numerics parse_numerics(std::string_view s, std::string_view what) {
  if (s == "exact") return Numerics::Exact;
  if (s == "mxfp8") return Numerics::Mxfp8;
  if (s == "bf16") return Numerics::Bf16;
  if (s == "int8") return Numerics::Int8;
  throw Error(std::string(what) + ": unknown numerics mode '" + std::string(s) +
              "' (expected exact, mxfp8, bf16 or int8)");
}

// Chosen from the measurements in docs/performance.md ("Prefill and numeric modes at K3 widths").
Numerics default_numerics() { return Numerics::Int8; }

const char* mxfp4_path_name(Mxfp4Path p) {
  switch (p) {
    case Mxfp4Path::Int8: return "int8";
    case Mxfp4Path::ExactF32: return "exact";
    case Mxfp4Path::Mxfp8: return "mxfp8";
  }
  return "?";
}

Mxfp4Path parse_mxfp4_path(std::string_view s, std::string_view what) {
  if (s == "int8") return Mxfp4Path::Int8;
  if (s == "exact") return Mxfp4Path::ExactF32;
  if (s == "mxfp8") return Mxfp4Path::Mxfp8;
  throw Error(std::string(what) + "=" + std::string(s) +
              ": expected 'int8', 'exact' or 'mxfp8' (or set the numerics mode instead: K3_NUMERICS / "
              "--numerics exact|mxfp8|bf16)");
}

}  // namespace k3
