// The tests' main: GoogleTest's, plus the process default execution config (kernels/exec_config.h)
// from the arguments --k3-isa=scalar|avx2|avx512 and --k3-numerics=exact|mxfp8|bf16|int8
// (tests/CMakeLists runs some suites again under another ISA or numerics mode this way). Models
// built with default ModelOptions and kernels called outside a model follow it.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <string_view>

#include "core/error.h"
#include "kernels/exec_config.h"

int main(int argc, char** argv) {
  k3::ExecConfig c;
  int n = 1;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string_view a = argv[i];
      if (a.rfind("--k3-isa=", 0) == 0) {
        c.isa = k3::select_isa(a.substr(9), "--k3-isa");
      } else if (a.rfind("--k3-numerics=", 0) == 0) {
        c.numerics = k3::parse_numerics(a.substr(14), "--k3-numerics");
      } else {
        argv[n++] = argv[i];
      }
    }
    k3::set_default_exec_config(c);
  } catch (const k3::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  argc = n;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
