// kda_recurrent (the fp32 oracle) vs an fp64 recurrence: algorithms.md §1.6 item 2
// (o and final state max-rel <= 1e-5).
#include "kernels/kda_recurrent.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "core/error.h"
#include "kda_test_util.h"

namespace k3 {
namespace {

using kda_test::Betas;
using kda_test::Gates;

struct Case {
  Gates gates;
  Betas betas;
};

TEST(KdaRecurrent, MatchesFp64Recurrence) {
  const Case cases[] = {{Gates::Uniform, Betas::Random},
                        {Gates::AllMin, Betas::NearOne},
                        {Gates::NearMin, Betas::NearZero},
                        {Gates::Mixed, Betas::NearOne}};
  uint32_t seed = 100;
  for (const Case& c : cases) {
    const auto in = kda_test::make_inputs(300, 2, 128, 128, c.gates, c.betas, seed++);
    std::vector<float> state = in.state, out(in.v.size());
    kda_recurrent(in.T, in.H, in.K, in.V, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                  state.data(), out.data());
    std::vector<double> state64(in.state.begin(), in.state.end()), out64;
    kda_test::recurrent_f64(in, state64, out64);
    const double eo = kda_test::max_rel(out, out64), es = kda_test::max_rel(state, state64);
    std::printf("kda_recurrent vs f64 gates=%d betas=%d: out %.3g state %.3g\n", static_cast<int>(c.gates),
                static_cast<int>(c.betas), eo, es);
    EXPECT_LE(eo, 1e-5);
    EXPECT_LE(es, 1e-5);
  }
}

TEST(KdaRecurrent, OddShapesMatchFp64) {
  const auto in = kda_test::make_inputs(33, 3, 37, 21, Gates::Uniform, Betas::Random, 7);
  std::vector<float> state = in.state, out(in.v.size());
  kda_recurrent(in.T, in.H, in.K, in.V, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                state.data(), out.data());
  std::vector<double> state64(in.state.begin(), in.state.end()), out64;
  kda_test::recurrent_f64(in, state64, out64);
  EXPECT_LE(kda_test::max_rel(out, out64), 1e-5);
  EXPECT_LE(kda_test::max_rel(state, state64), 1e-5);
}

TEST(KdaRecurrent, ZeroTokensLeavesStateAndRejectsBadSizes) {
  std::vector<float> state(2 * 4 * 4, 1.5f);
  kda_recurrent(0, 2, 4, 4, nullptr, nullptr, nullptr, nullptr, nullptr, state.data(), nullptr);
  for (float s : state) EXPECT_EQ(s, 1.5f);
  EXPECT_THROW(kda_recurrent(-1, 2, 4, 4, nullptr, nullptr, nullptr, nullptr, nullptr, state.data(), nullptr), Error);
  EXPECT_THROW(kda_recurrent(1, 0, 4, 4, nullptr, nullptr, nullptr, nullptr, nullptr, state.data(), nullptr), Error);
}

}  // namespace
}  // namespace k3
