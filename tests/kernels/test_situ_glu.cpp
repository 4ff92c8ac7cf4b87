// Fused SiTU-GLU (k3-architecture.md §3.4) of every supported ISA vs an fp64 oracle.
#include <gtest/gtest.h>

#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace {

using namespace k3test;

double situ_ref(double g, double u, double b1, double b2) {
  const double up = b2 > 0 ? b2 * std::tanh(u / b2) : u;
  return b1 * std::tanh(g / b1) / (1.0 + std::exp(-g)) * up;
}

TEST(SituGlu, EveryIsaMatchesOracle) {
  std::mt19937 g(8);
  for (int64_t n : {1, 7, 8, 9, 31, 1003}) {
    auto gv = rand_f32(g, n, -30.f, 30.f);
    auto uv = rand_f32(g, n, -80.f, 80.f);
    if (n > 20) {  // special values: tiny, around the polynomial switch, saturation
      gv[0] = 1e-6f;
      uv[0] = -1e-6f;
      gv[1] = 2.5f;
      uv[1] = 15.6f;
      gv[2] = -100.f;
      uv[2] = 200.f;
      gv[3] = 95.f;
      uv[3] = -1e4f;
      gv[4] = 0.f;
      gv[5] = -2.49f;
      uv[5] = 15.62f;
    }
    for (float b2 : {25.f, 0.f}) {
      for (k3::Isa isa : isas_under_test()) {
        std::vector<float> out(n);
        k3::kernels_for(isa).situ_glu(gv.data(), uv.data(), out.data(), n, 4.f, b2);
        for (int64_t i = 0; i < n; ++i) {
          const double r = situ_ref(gv[i], uv[i], 4.0, b2);
          ASSERT_LE(std::fabs(out[i] - r), Tol::kSituRel * std::fabs(r) + Tol::kSituAbs)
              << k3::isa_name(isa) << " g=" << gv[i] << " u=" << uv[i] << " b2=" << b2;
        }
      }
    }
  }
}

TEST(SituGlu, OpsInPlaceAndErrors) {
  std::vector<float> g{0.5f, -1.f, 3.f}, u{1.f, 2.f, -4.f};
  std::vector<float> expect(3);
  for (int i = 0; i < 3; ++i) expect[i] = static_cast<float>(situ_ref(g[i], u[i], 4, 25));
  k3::situ_glu(g.data(), u.data(), g.data(), 3, 4.f, 25.f);  // out aliases g
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(g[i], expect[i], 1e-6);
  EXPECT_THROW(k3::situ_glu(g.data(), u.data(), g.data(), 3, 0.f, 25.f), k3::Error);
}

}  // namespace
