// kda_decode_step vs the kda_recurrent oracle (algorithms.md §1.2, §1.6), and chunked prefill
// followed by decode steps vs one recurrence (§1.6 item 5).
#include "kernels/kda_decode.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "kda_test_util.h"
#include "kernels/dispatch.h"
#include "kernels/kda_chunk.h"
#include "kernels/kda_recurrent.h"

namespace k3 {
namespace {

using kda_test::Betas;
using kda_test::Gates;

// Runs T decode steps token by token; returns outputs [T,H,V]; state updated in place.
std::vector<float> run_decode(Isa isa, const kda_test::Inputs& in, int t0, std::vector<float>& state) {
  const std::size_t hk = static_cast<std::size_t>(in.H) * in.K, hv = static_cast<std::size_t>(in.H) * in.V;
  std::vector<float> out(static_cast<std::size_t>(in.T - t0) * hv);
  for (int t = t0; t < in.T; ++t)
    kda_decode_step(isa, in.H, in.K, in.V, &in.q[t * hk], &in.k[t * hk], &in.v[t * hv], &in.g[t * hk],
                    &in.beta[static_cast<std::size_t>(t) * in.H], state.data(), &out[(t - t0) * hv]);
  return out;
}

TEST(KdaDecode, StepsMatchRecurrence) {
  struct Shape {
    int T, H, K, V;
    Gates gates;
    Betas betas;
  };
  const Shape shapes[] = {{200, 4, 128, 128, Gates::Uniform, Betas::Random},
                          {64, 3, 128, 128, Gates::AllMin, Betas::NearOne},
                          {64, 3, 128, 128, Gates::NearMin, Betas::NearZero},
                          {50, 5, 37, 19, Gates::Mixed, Betas::Random},
                          {20, 1, 1, 1, Gates::Uniform, Betas::Random}};
  uint32_t seed = 300;
  for (const Shape& s : shapes) {
    const auto in = kda_test::make_inputs(s.T, s.H, s.K, s.V, s.gates, s.betas, seed++);
    std::vector<float> st_ref = in.state, out_ref(in.v.size());
    kda_recurrent(in.T, in.H, in.K, in.V, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                  st_ref.data(), out_ref.data());
    for (Isa isa : supported_isas()) {
      std::vector<float> st = in.state;
      const auto out = run_decode(isa, in, 0, st);
      const double eo = kda_test::max_rel(out, out_ref), es = kda_test::max_rel(st, st_ref);
      std::printf("kda_decode[%s] vs recurrent T=%d H=%d K=%d V=%d: out %.3g state %.3g\n", isa_name(isa), s.T, s.H,
                  s.K, s.V, eo, es);
      EXPECT_LE(eo, 1e-6) << isa_name(isa);
      EXPECT_LE(es, 1e-6) << isa_name(isa);
    }
  }
}

TEST(KdaDecode, ChunkedPrefillThenDecodeMatchesRecurrence) {
  const auto in = kda_test::make_inputs(100, 2, 128, 128, Gates::Uniform, Betas::Random, 41);
  std::vector<float> st_ref = in.state, out_ref(in.v.size());
  kda_recurrent(in.T, in.H, in.K, in.V, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                st_ref.data(), out_ref.data());
  const int P = 93;  // prefill 93 tokens (one full chunk + 29), then 7 decode steps
  std::vector<float> st = in.state, out(in.v.size());
  kda_chunk(P, in.H, in.K, in.V, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), st.data(),
            out.data());
  const auto tail = run_decode(active_isa(), in, P, st);
  std::copy(tail.begin(), tail.end(), out.begin() + static_cast<std::ptrdiff_t>(P) * in.H * in.V);
  EXPECT_LE(kda_test::max_rel(out, out_ref), 1e-5);
  EXPECT_LE(kda_test::max_rel(st, st_ref), 1e-5);
}

TEST(KdaDecode, RejectsBadSizes) {
  float x = 0.f;
  EXPECT_THROW(kda_decode_step(0, 4, 4, &x, &x, &x, &x, &x, &x, &x), Error);
  EXPECT_THROW(kda_decode_step(1, 4, 0, &x, &x, &x, &x, &x, &x, &x), Error);
}

}  // namespace
}  // namespace k3
