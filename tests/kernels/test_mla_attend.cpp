// MLA attention ops (kernels/mla_attend.h) of every supported ISA against a plain fp64 oracle
// written here (expanded k_nope/v per row, causal softmax), at (n_past, T) on and around the
// 128-row tile and 1024-row segment edges and the flash-decoding chunk edges; 1 vs 2 threads
// bit-identical; a prompt cut into two calls gives the bits of one call; the bf16/fp8 cache
// encodings (row layout, bounds, NaN, the named values of E4M3) and the attention over them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/exec_config.h"
#include "kernels/mla_attend.h"

namespace {

using namespace k3test;
using k3::MlaCacheType;

struct Case {
  k3::MlaAttnShape s;
  std::vector<uint16_t> kvb;  // [H·(dn + dv), kvr] bf16
  k3::MlaKvbHalves halves() const {
    k3::MlaKvbHalves h;
    h.k_nope = kvb.data();
    h.v = kvb.data() + s.dn * s.kvr;
    h.head_stride = (s.dn + s.dv) * s.kvr;
    h.name = "test.kv_b";
    return h;
  }
};

Case make_case(std::mt19937& g, int64_t H, int64_t dn, int64_t dr, int64_t dv, int64_t kvr) {
  Case c;
  c.s = k3::MlaAttnShape{H, dn, dr, dv, kvr};
  c.kvb = rand_bf16(g, static_cast<size_t>(H * (dn + dv) * kvr));
  for (auto& b : c.kvb) b = k3::f32_to_bf16(k3::bf16_to_f32(b) * 0.5f);
  return c;
}

// fp64 oracle: o [T, H, dv] over fp32 rows [n_past + T, kvr + dr].
std::vector<double> oracle(const Case& c, const std::vector<float>& q, int64_t T, const std::vector<float>& rows,
                           int64_t n_past) {
  const auto& s = c.s;
  const int64_t dq = s.dn + s.dr, row = s.kvr + s.dr, hw = s.dn + s.dv, n_all = n_past + T;
  std::vector<double> o(static_cast<size_t>(T * s.H * s.dv));
  std::vector<double> kv(static_cast<size_t>(n_all * hw)), p(static_cast<size_t>(n_all));
  for (int64_t h = 0; h < s.H; ++h) {
    for (int64_t j = 0; j < n_all; ++j)
      for (int64_t i = 0; i < hw; ++i) {
        double a = 0;
        for (int64_t k = 0; k < s.kvr; ++k)
          a += static_cast<double>(k3::bf16_to_f32(c.kvb[(h * hw + i) * s.kvr + k])) * rows[j * row + k];
        kv[j * hw + i] = a;
      }
    for (int64_t t = 0; t < T; ++t) {
      const float* qh = &q[(t * s.H + h) * dq];
      const int64_t n = n_past + t + 1;
      double mx = -1e300;
      for (int64_t j = 0; j < n; ++j) {
        double a = 0;
        for (int64_t i = 0; i < s.dn; ++i) a += qh[i] * kv[j * hw + i];
        for (int64_t i = 0; i < s.dr; ++i) a += static_cast<double>(qh[s.dn + i]) * rows[j * row + s.kvr + i];
        p[j] = a / std::sqrt(static_cast<double>(dq));
        mx = std::max(mx, p[j]);
      }
      double l = 0;
      for (int64_t j = 0; j < n; ++j) l += (p[j] = std::exp(p[j] - mx));
      for (int64_t i = 0; i < s.dv; ++i) {
        double a = 0;
        for (int64_t j = 0; j < n; ++j) a += p[j] * kv[j * hw + s.dn + i];
        o[(t * s.H + h) * s.dv + i] = a / l;
      }
    }
  }
  return o;
}

std::vector<float> run(bool expanded, const Case& c, const std::vector<float>& q, int64_t T,
                       const std::vector<uint8_t>& enc, MlaCacheType type, int64_t n_past) {
  std::vector<float> o(static_cast<size_t>(T * c.s.H * c.s.dv), -7.f);
  const k3::MlaRows rows{enc.data(), type};
  if (expanded) k3::mla_attend_expanded(c.halves(), c.s, q.data(), T, rows, n_past, o.data());
  else k3::mla_attend_absorbed(c.halves(), c.s, q.data(), T, rows, n_past, o.data());
  return o;
}

std::vector<uint8_t> encode(MlaCacheType t, const std::vector<float>& rows, const k3::MlaAttnShape& s) {
  const int64_t n = static_cast<int64_t>(rows.size()) / (s.kvr + s.dr);
  std::vector<uint8_t> e(static_cast<size_t>(n * k3::mla_cache_row_bytes(t, s.kvr, s.dr)));
  k3::mla_cache_encode(t, rows.data(), n, s.kvr, s.dr, e.data());
  return e;
}

// Max |a − ref| / max |ref|.
double rel_err(const std::vector<float>& a, const std::vector<double>& ref) {
  double e = 0, m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    e = std::max(e, std::fabs(a[i] - ref[i]));
    m = std::max(m, std::fabs(ref[i]));
  }
  return e / m;
}

std::optional<k3::ExecContext> context(k3::Isa isa, int threads) {
  k3::ExecConfig c;
  c.isa = isa;
  c.threads = threads;
  try {
    return k3::resolve_exec_config(c);
  } catch (const k3::Error&) {
    return std::nullopt;  // this CPU lacks the ISA (isas_under_test() lists it as such)
  }
}

// fp32 vs the fp64 oracle: scores, exponentials and sums in fp32 over up to ~2300 rows.
constexpr double kF32Rel = 2e-5;

TEST(MlaAttend, TiledPrefillAndFlashDecodeMatchTheOracleOnEveryIsa) {
  std::mt19937 g(5);
  const Case mini = make_case(g, 2, 32, 16, 32, 64);  // K3-mini's MLA heads
  const Case odd = make_case(g, 3, 24, 8, 20, 40);    // widths that are not multiples of a vector
  struct NT {
    int64_t n_past, T;
  };
  // tile edges (128), segment edges (1024 rows), decode chunk edges (512 rows), short prompts
  const std::vector<NT> cases = {{0, 1},   {0, 5},    {0, 128},  {0, 129},   {127, 1},   {127, 2},
                                 {128, 31}, {100, 200}, {511, 1}, {512, 1},   {1000, 70}, {1023, 1},
                                 {1024, 33}, {2047, 2}, {960, 130}, {2100, 1}};
  for (k3::Isa isa : isas_under_test()) {
    const auto ctx = context(isa, 2);
    ASSERT_TRUE(ctx);
    const k3::ExecScope scope(*ctx);
    for (const Case* c : {&mini, &odd})
      for (const NT& nt : cases) {
        const int64_t row = c->s.kvr + c->s.dr, dq = c->s.dn + c->s.dr;
        const auto rows = rand_f32(g, static_cast<size_t>((nt.n_past + nt.T) * row));
        const auto q = rand_f32(g, static_cast<size_t>(nt.T * c->s.H * dq), -2.f, 2.f);
        const auto ref = oracle(*c, q, nt.T, rows, nt.n_past);
        const auto enc = encode(MlaCacheType::F32, rows, c->s);
        for (bool expanded : {true, false}) {
          const auto o = run(expanded, *c, q, nt.T, enc, MlaCacheType::F32, nt.n_past);
          EXPECT_LT(rel_err(o, ref), kF32Rel) << k3::isa_name(isa) << (expanded ? " expanded" : " absorbed")
                                              << " H=" << c->s.H << " n_past=" << nt.n_past << " T=" << nt.T;
        }
      }
  }
}

TEST(MlaAttend, OneAndTwoThreadsGiveTheSameBits) {
  std::mt19937 g(6);
  const Case c = make_case(g, 2, 32, 16, 32, 64);
  const int64_t row = 80, dq = 48;
  for (k3::Isa isa : isas_under_test())
    for (auto [n_past, T] : {std::pair<int64_t, int64_t>{3000, 70}, {5000, 1}, {0, 300}}) {
      const auto rows = rand_f32(g, static_cast<size_t>((n_past + T) * row));
      const auto q = rand_f32(g, static_cast<size_t>(T * 2 * dq), -2.f, 2.f);
      const auto enc = encode(MlaCacheType::F32, rows, c.s);
      for (bool expanded : {true, false}) {
        std::vector<float> o1, o2;
        {
          const auto ctx = context(isa, 1);
          const k3::ExecScope scope(*ctx);
          o1 = run(expanded, c, q, T, enc, MlaCacheType::F32, n_past);
        }
        {
          const auto ctx = context(isa, 2);
          const k3::ExecScope scope(*ctx);
          o2 = run(expanded, c, q, T, enc, MlaCacheType::F32, n_past);
        }
        ASSERT_EQ(std::memcmp(o1.data(), o2.data(), o1.size() * 4), 0)
            << k3::isa_name(isa) << (expanded ? " expanded" : " absorbed") << " n_past=" << n_past << " T=" << T;
      }
    }
}

TEST(MlaAttend, APromptCutIntoTwoCallsGivesTheBitsOfOneCall) {
  std::mt19937 g(7);
  const Case c = make_case(g, 2, 32, 16, 32, 64);
  const int64_t row = 80, dq = 48, N = 1500;
  const auto rows = rand_f32(g, static_cast<size_t>(N * row));
  const auto q = rand_f32(g, static_cast<size_t>(N * 2 * dq), -2.f, 2.f);
  const auto enc = encode(MlaCacheType::F32, rows, c.s);
  for (k3::Isa isa : isas_under_test()) {
    const auto ctx = context(isa, 2);
    const k3::ExecScope scope(*ctx);
    const auto whole = run(true, c, q, N, enc, MlaCacheType::F32, 0);
    for (int64_t cut : {1, 128, 700, 1024, 1300}) {
      const std::vector<float> q2(q.begin() + cut * 2 * dq, q.end());
      const auto tail = run(true, c, q2, N - cut, enc, MlaCacheType::F32, cut);
      ASSERT_EQ(std::memcmp(tail.data(), whole.data() + cut * 2 * 32, tail.size() * 4), 0)
          << k3::isa_name(isa) << " cut " << cut;
    }
  }
}

TEST(MlaCacheType, NamesParseAndBadNamesAreRefused) {
  for (MlaCacheType t : {MlaCacheType::F32, MlaCacheType::BF16, MlaCacheType::FP8})
    EXPECT_EQ(k3::parse_mla_cache_type(k3::mla_cache_type_name(t)), t);
  for (const char* bad : {"", "F32", "fp16", "bf8", "fp8 "}) {
    try {
      k3::parse_mla_cache_type(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const k3::Error& e) {
      EXPECT_NE(std::string(e.what()).find("expected f32, bf16 or fp8"), std::string::npos) << e.what();
    }
  }
  // Bytes per row: K3 (kvr 512, dr 64): 2304 / 1152 / 656 (FlashMLA's FP8 layout); K3-mini.
  EXPECT_EQ(k3::mla_cache_row_bytes(MlaCacheType::F32, 512, 64), 2304);
  EXPECT_EQ(k3::mla_cache_row_bytes(MlaCacheType::BF16, 512, 64), 1152);
  EXPECT_EQ(k3::mla_cache_row_bytes(MlaCacheType::FP8, 512, 64), 656);
  EXPECT_EQ(k3::mla_cache_row_bytes(MlaCacheType::FP8, 64, 16), 64 + 4 + 32);
}

TEST(MlaCacheType, EncodingsRoundTripWithinTheirBounds) {
  std::mt19937 g(8);
  const int64_t kvr = 200, dr = 16, row = kvr + dr, n = 50;  // two FP8 groups, the second short
  auto x = rand_f32(g, static_cast<size_t>(n * row), -3.f, 3.f);
  x[5] = 0.f;
  x[row + 7] = 1e-9f;  // far below the group's scale: flushes toward 0
  std::vector<float> y(x.size());
  const auto bf = encode(MlaCacheType::BF16, x, {1, 1, dr, 1, kvr});
  k3::mla_cache_decode(MlaCacheType::BF16, bf.data(), n, kvr, dr, y.data());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_LE(std::fabs(y[i] - x[i]), std::ldexp(std::fabs(x[i]), -8)) << i;
  const auto f8 = encode(MlaCacheType::FP8, x, {1, 1, dr, 1, kvr});
  k3::mla_cache_decode(MlaCacheType::FP8, f8.data(), n, kvr, dr, y.data());
  for (int64_t s = 0; s < n; ++s)
    for (int64_t grp = 0; grp < 2; ++grp) {
      const int64_t i0 = grp * 128, i1 = std::min<int64_t>(kvr, i0 + 128);
      float amax = 0;
      for (int64_t i = i0; i < i1; ++i) amax = std::max(amax, std::fabs(x[s * row + i]));
      const double scale = amax / 448.0;
      for (int64_t i = i0; i < i1; ++i) {
        const double xi = x[s * row + i], yi = y[s * row + i];
        ASSERT_LE(std::fabs(yi - xi), std::max(std::ldexp(std::fabs(xi), -4), std::ldexp(scale, -10)) * 1.0001)
            << s << " " << i;
      }
      for (int64_t i = 0; i < dr; ++i)  // k_r in bf16
        ASSERT_LE(std::fabs(y[s * row + kvr + i] - x[s * row + kvr + i]), std::ldexp(std::fabs(x[s * row + kvr + i]), -8));
    }
  // Named E4M3 values: the group max maps to 448 exactly (code 0x7E), so the decode is exact.
  std::vector<float> one(row, 0.f);
  one[0] = 448.f, one[1] = 1.f, one[2] = -0.5f, one[3] = std::ldexp(1.f, -9), one[4] = 0.8125f;
  const auto e1 = encode(MlaCacheType::FP8, one, {1, 1, dr, 1, kvr});
  EXPECT_EQ(e1[0], 0x7E);
  EXPECT_EQ(e1[1], 0x38);
  EXPECT_EQ(e1[2], 0xB0);
  EXPECT_EQ(e1[3], 0x01);
  EXPECT_EQ(e1[4], 0x35);  // 0.8125 = 1.625·2^-1: exponent 6, mantissa 5
  k3::mla_cache_decode(MlaCacheType::FP8, e1.data(), 1, kvr, dr, y.data());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(y[i], one[i]) << i;
  // A group holding NaN or Inf decodes to NaN (never a finite garbage value).
  one[9] = std::numeric_limits<float>::infinity();
  const auto e2 = encode(MlaCacheType::FP8, one, {1, 1, dr, 1, kvr});
  k3::mla_cache_decode(MlaCacheType::FP8, e2.data(), 1, kvr, dr, y.data());
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(y[150], 0.f);  // the second group is untouched
}

TEST(MlaCacheType, AttentionOverBf16AndFp8RowsIsTheF32AttentionOfTheDecodedRows) {
  std::mt19937 g(9);
  const Case c = make_case(g, 2, 32, 16, 32, 64);
  const int64_t row = 80, dq = 48;
  for (k3::Isa isa : isas_under_test()) {
    const auto ctx = context(isa, 2);
    const k3::ExecScope scope(*ctx);
    for (auto [n_past, T] : {std::pair<int64_t, int64_t>{0, 40}, {1100, 1}, {900, 150}}) {
      const auto rows = rand_f32(g, static_cast<size_t>((n_past + T) * row));
      const auto q = rand_f32(g, static_cast<size_t>(T * 2 * dq), -2.f, 2.f);
      const auto exact = oracle(c, q, T, rows, n_past);
      for (MlaCacheType t : {MlaCacheType::BF16, MlaCacheType::FP8}) {
        const auto enc = encode(t, rows, c.s);
        std::vector<float> dec(rows.size());
        k3::mla_cache_decode(t, enc.data(), n_past + T, 64, 16, dec.data());
        const auto ref = oracle(c, q, T, dec, n_past);
        for (bool expanded : {true, false}) {
          const auto o = run(expanded, c, q, T, enc, t, n_past);
          EXPECT_LT(rel_err(o, ref), kF32Rel) << k3::mla_cache_type_name(t) << " " << k3::isa_name(isa);
          // vs the f32 cache: bf16 rows 2^-8 per element, fp8 2^-4 (measured 2e-3 / 3e-2 here)
          EXPECT_LT(rel_err(o, exact), t == MlaCacheType::BF16 ? 1e-2 : 1e-1) << k3::mla_cache_type_name(t);
        }
      }
    }
  }
}

}  // namespace
