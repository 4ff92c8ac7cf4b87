// k3::vec primitives (vec.h) of every supported ISA (KernelTable entries, vec_impl.h) vs fp64
// oracles: plain fp64 loops here, and k3::ref (norms.h) for RMSNorm / L2 norm / softmax.
// Sizes are deliberately not multiples of any vector width (4, 8, 16 lanes; 64-element unroll).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernel_test_util.h"
#include "kernels/ref/norms.h"
#include "kernels/vec.h"

namespace {

using namespace k3test;

// ---- Tolerances -------------------------------------------------------------------------------
// kU: the fp32 unit roundoff (half an ulp of 1).
constexpr double kU = 0x1p-24;
// Element-wise bounds, relative to the fp64 value. Measured worst cases over 3·2^22 random inputs
// in [-87.3, 88.7], [-20, 20], [-2, 2] (scalar and AVX2 builds): exp 1.4u (Cephes polynomial +
// two-constant ln2 reduction; the 2^k factors are exact), σ 3.4u (exp, 1+e, the division and, for
// x < 0, the multiply by e), SiLU 4.0u (one more multiply). The bounds leave a 2.5-3x margin.
constexpr double kExpRel = 4 * kU;
constexpr double kSigmoidRel = 8 * kU;
constexpr double kSiluRel = 10 * kU;
// Results below FLT_MIN (|x| > 87.3 for exp / σ, scaled by |x| for SiLU) are flushed to 0, so
// every element-wise check also allows this absolute error (times max(1, |x|) for SiLU).
constexpr double kFlushAbs = FLT_MIN;
// scale / axpy: one or two correctly rounded fp32 operations (axpy may be one FMA).
constexpr double kLinRel = 2 * kU;

// Reductions in fp32 with fixed partial sums: each result is a chain of at most
// n/16 + 32 roundings (>= 16 partial sums on every ISA: 4 lanes x 4 chains; the tail vector,
// the accumulator merge and a <= 16-lane horizontal sum), so by the classical recursive-summation
// bound |err| <= (n/16 + 32)·u·Σ|terms| (products included). This is a worst case, not a
// statistical estimate; typical errors are ~sqrt of it (the tests print the worst err/bound).
inline double red_gamma(int64_t n) { return (static_cast<double>(n) / 16.0 + 32.0) * kU; }
// RMSNorm / L2 norm: Σx² has the relative error red_gamma(n) (all terms positive); the root
// halves it; /n, +eps, sqrt, 1/·, two multiplies and the oracle's float output add <= 8u.
inline double norm_rel(int64_t n) { return 0.5 * red_gamma(n) + 8 * kU; }

constexpr int64_t kSizes[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 64, 127, 1000, 12288};

// Worst observed error / bound per check, printed once per test (how tight the bounds are).
struct Worst {
  const char* name;
  double r = 0;
  void add(double err, double bound) { r = std::max(r, bound > 0 ? err / bound : 0); }
  ~Worst() { std::printf("[vec] %-16s worst err/bound = %.3f\n", name, r); }
};

// got vs an fp64 reference value: NaN must match NaN, an out-of-range reference must match the
// float conversion (±inf) exactly, otherwise |got − ref| <= rel·|ref| + abs.
::testing::AssertionResult near(float got, double ref, double rel, double abs, Worst* w = nullptr) {
  if (std::isnan(ref)) {
    if (std::isnan(got)) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "got " << got << ", want NaN";
  }
  if (std::isinf(static_cast<float>(ref)) || std::isinf(ref)) {
    if (got == static_cast<float>(ref)) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "got " << got << ", want " << static_cast<float>(ref);
  }
  const double err = std::fabs(static_cast<double>(got) - ref), bound = rel * std::fabs(ref) + abs;
  // (the worst ratio is recorded where the relative term dominates, i.e. not for flushed tiny
  // results, so the printed number says how tight rel is)
  if (w && (rel == 0 || rel * std::fabs(ref) >= abs)) w->add(err, bound);
  if (err <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << got << ", want " << ref << " (err " << err << " > bound " << bound
                                       << ")";
}

double sigmoid64(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double silu64(double x) { return std::isinf(x) && x < 0 ? 0.0 : x * sigmoid64(x); }

// Inputs spanning the interesting ranges, plus the special values at the start when n is large.
std::vector<float> act_input(std::mt19937& g, int64_t n, float lo, float hi) {
  auto x = rand_f32(g, n, lo, hi);
  const float sp[] = {0.f, -0.f, 1e-8f, -1e-8f, 20.f, -20.f, 88.f, -88.f, 0.5f, -0.5f};
  if (n >= 64)
    for (size_t i = 0; i < std::size(sp); ++i) x[i] = sp[i];
  return x;
}

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();
// Special inputs for the element-wise functions (n = 15: also exercises the padded tail).
const std::vector<float> kSpecial = {0.f,   -0.f,   1e-8f, -1e-8f, 20.f, -20.f, 88.f,  -88.f,
                                     100.f, -100.f, kInf,  -kInf,  kNaN, 88.7f, -87.3f};

TEST(Vec, DotAndSumSq) {
  std::mt19937 g(1);
  Worst wd{"dot"}, ws{"sum_sq"};
  for (k3::Isa isa : isas_under_test()) {
    const k3::KernelTable& k = k3::kernels_for(isa);
    EXPECT_EQ(k.dot(nullptr, nullptr, 0), 0.f);
    EXPECT_EQ(k.sum_sq(nullptr, 0), 0.f);
    for (int64_t n : kSizes) {
      const auto a = rand_f32(g, n, -2.f, 2.f), b = rand_f32(g, n, -3.f, 1.f);
      double d = 0, sa = 0, ss = 0;
      for (int64_t i = 0; i < n; ++i) {
        d += static_cast<double>(a[i]) * b[i];
        sa += std::fabs(static_cast<double>(a[i]) * b[i]);
        ss += static_cast<double>(a[i]) * a[i];
      }
      EXPECT_TRUE(near(k.dot(a.data(), b.data(), n), d, 0, red_gamma(n) * sa, &wd)) << k3::isa_name(isa) << " n=" << n;
      EXPECT_TRUE(near(k.sum_sq(a.data(), n), ss, 0, red_gamma(n) * ss, &ws)) << k3::isa_name(isa) << " n=" << n;
    }
  }
}

TEST(Vec, AxpyAndScale) {
  std::mt19937 g(2);
  Worst wa{"axpy"}, wsc{"scale"};
  for (k3::Isa isa : isas_under_test()) {
    const k3::KernelTable& k = k3::kernels_for(isa);
    for (int64_t n : kSizes) {
      const auto x = rand_f32(g, n, -4.f, 4.f), y0 = rand_f32(g, n);
      const float a = -1.37f;
      auto y = y0;
      k.axpy(a, x.data(), y.data(), n);
      std::vector<float> s(n), s_alias = x;
      k.scale(x.data(), a, s.data(), n);
      k.scale(s_alias.data(), a, s_alias.data(), n);  // y == x
      for (int64_t i = 0; i < n; ++i) {
        const double p = static_cast<double>(a) * x[i];
        // axpy: two roundings of magnitude <= |p| + |y|.
        ASSERT_TRUE(near(y[i], y0[i] + p, 0, kLinRel * (std::fabs(p) + std::fabs(y0[i])), &wa))
            << k3::isa_name(isa) << " n=" << n << " i=" << i;
        ASSERT_TRUE(near(s[i], p, kLinRel, 0, &wsc)) << k3::isa_name(isa) << " n=" << n;
        ASSERT_EQ(s_alias[i], s[i]) << k3::isa_name(isa) << " aliased scale n=" << n;
      }
    }
  }
}

// Element-wise activation: kernel f of table k vs fp64 oracle ref on x, plus the aliased call.
template <class KFn, class RFn>
void check_act(const char* what, KFn kf, RFn ref, double rel, bool abs_scales_with_x, Worst& w,
               const std::vector<float>& x, k3::Isa isa) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> y(n, 7.f), ya = x;
  kf(x.data(), y.data(), n);
  kf(ya.data(), ya.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double abs = kFlushAbs * (abs_scales_with_x ? std::max(1.0, std::fabs(double(x[i]))) : 1.0);
    ASSERT_TRUE(near(y[i], ref(static_cast<double>(x[i])), rel, abs, &w))
        << what << " " << k3::isa_name(isa) << " n=" << n << " x=" << x[i];
    ASSERT_TRUE(std::memcmp(&ya[i], &y[i], 4) == 0 || (std::isnan(ya[i]) && std::isnan(y[i])))
        << what << " aliased " << k3::isa_name(isa) << " n=" << n << " x=" << x[i];
  }
}

TEST(Vec, SigmoidSiluExp) {
  std::mt19937 g(3);
  Worst ws{"sigmoid"}, wl{"silu"}, we{"exp"};
  for (k3::Isa isa : isas_under_test()) {
    const k3::KernelTable& k = k3::kernels_for(isa);
    auto dexp = [](double x) { return std::exp(x); };
    for (int64_t n : kSizes) {
      for (auto [lo, hi] : {std::pair{-12.f, 12.f}, std::pair{-100.f, 100.f}}) {
        const auto x = act_input(g, n, lo, hi);
        check_act("sigmoid", k.sigmoid, sigmoid64, kSigmoidRel, false, ws, x, isa);
        check_act("silu", k.silu, silu64, kSiluRel, true, wl, x, isa);
        check_act("exp", k.exp, dexp, kExpRel, false, we, x, isa);
      }
    }
    check_act("sigmoid", k.sigmoid, sigmoid64, kSigmoidRel, false, ws, kSpecial, isa);
    check_act("silu", k.silu, silu64, kSiluRel, true, wl, kSpecial, isa);
    check_act("exp", k.exp, dexp, kExpRel, false, we, kSpecial, isa);
    // n = 0 writes nothing.
    float sentinel = 3.f;
    k.sigmoid(&sentinel, &sentinel, 0);
    k.silu(&sentinel, &sentinel, 0);
    k.exp(&sentinel, &sentinel, 0);
    EXPECT_EQ(sentinel, 3.f);
  }
}

TEST(Vec, SpecialValuesExact) {
  for (k3::Isa isa : isas_under_test()) {
    const k3::KernelTable& k = k3::kernels_for(isa);
    const std::vector<float> x = {0.f, -0.f, 100.f, -100.f, kInf, -kInf, kNaN, 89.f, -104.f};
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<float> s(n), l(n), e(n);
    k.sigmoid(x.data(), s.data(), n);
    k.silu(x.data(), l.data(), n);
    k.exp(x.data(), e.data(), n);
    const char* name = k3::isa_name(isa);
    EXPECT_EQ(s[0], 0.5f) << name;
    EXPECT_EQ(s[1], 0.5f) << name;
    EXPECT_EQ(s[2], 1.f) << name;  // saturates exactly
    EXPECT_EQ(s[3], 0.f) << name;  // (true value 3.7e-44 is below FLT_MIN: flushed)
    EXPECT_EQ(s[4], 1.f) << name;  // σ(+inf) = 1
    EXPECT_EQ(s[5], 0.f) << name;  // σ(−inf) = 0, not NaN
    EXPECT_TRUE(std::isnan(s[6])) << name;
    EXPECT_EQ(l[0], 0.f) << name;
    EXPECT_EQ(l[2], 100.f) << name;
    EXPECT_EQ(l[3], 0.f) << name;   // −100·0 (flushed σ)
    EXPECT_EQ(l[4], kInf) << name;  // SiLU(+inf) = +inf
    EXPECT_EQ(l[5], 0.f) << name;   // SiLU(−inf) = 0 (the limit), not NaN
    EXPECT_TRUE(std::isnan(l[6])) << name;
    EXPECT_EQ(e[0], 1.f) << name;  // exp(±0) = 1 exactly
    EXPECT_EQ(e[1], 1.f) << name;
    EXPECT_EQ(e[2], kInf) << name;  // exp(100) overflows to +inf
    EXPECT_EQ(e[3], 0.f) << name;   // below ln(FLT_MIN): exactly 0
    EXPECT_EQ(e[4], kInf) << name;  // exp(+inf) = +inf
    EXPECT_EQ(e[5], 0.f) << name;   // exp(−inf) = 0
    EXPECT_TRUE(std::isnan(e[6])) << name;
    EXPECT_EQ(e[7], kInf) << name;  // exp(89) > FLT_MAX
    EXPECT_EQ(e[8], 0.f) << name;
    float big = 88.72f, eb;
    k.exp(&big, &eb, 1);  // e^88.72 = 3.3936e38 < FLT_MAX: finite (2^128 scale path)
    EXPECT_TRUE(near(eb, std::exp(double(big)), kExpRel, 0)) << name;
  }
}

TEST(Vec, MulSigmoid) {
  std::mt19937 g(4);
  Worst w{"mul_sigmoid"};
  for (k3::Isa isa : isas_under_test()) {
    const k3::KernelTable& k = k3::kernels_for(isa);
    for (int64_t n : kSizes) {
      const auto gv = act_input(g, n, -30.f, 30.f), y0 = rand_f32(g, n, -5.f, 5.f);
      auto y = y0;
      k.mul_sigmoid(gv.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_TRUE(near(y[i], y0[i] * sigmoid64(gv[i]), kSiluRel, 5 * kFlushAbs, &w))
            << k3::isa_name(isa) << " n=" << n << " g=" << gv[i];
    }
  }
}

TEST(Vec, Softmax) {
  std::mt19937 g(5);
  Worst w{"softmax"};
  for (k3::Isa isa : isas_under_test()) {
    const k3::KernelTable& k = k3::kernels_for(isa);
    for (int64_t n : kSizes) {
      for (float range : {1.f, 10.f, 60.f}) {
        auto x = rand_f32(g, n, -range, range);
        if (n >= 3) x[n / 2] = -kInf;  // a masked position
        const float mx = *std::max_element(x.begin(), x.end());
        double dmax = 0, sum = 0;
        for (float v : x)
          if (std::isfinite(v)) dmax = std::max(dmax, double(mx) - v);
        for (float v : x) sum += std::exp(double(v) - mx);
        auto y = x;
        k.softmax(y.data(), n);
        // Error: x_i − max is rounded (relative error <= u·|x_i − max| in e_i, and the sum
        // inherits the largest), exp, the fp32 sum, 1/sum and the multiply.
        for (int64_t i = 0; i < n; ++i) {
          const double d = std::isfinite(x[i]) ? double(mx) - x[i] : 0.0;
          const double rel = kU * (d + dmax) + 2 * kExpRel + red_gamma(n) + 3 * kU;
          ASSERT_TRUE(near(y[i], std::exp(double(x[i]) - mx) / sum, rel, kFlushAbs, &w))
              << k3::isa_name(isa) << " n=" << n << " range=" << range << " i=" << i;
        }
        // And k3::ref::softmax (float output: one more half ulp).
        std::vector<float> r(n);
        k3::ref::softmax(x.data(), n, r.data());
        for (int64_t i = 0; i < n; ++i) {
          const double d = std::isfinite(x[i]) ? double(mx) - x[i] : 0.0;
          const double rel = kU * (d + dmax) + 2 * kExpRel + red_gamma(n) + 4 * kU;
          ASSERT_TRUE(near(y[i], r[i], rel, kFlushAbs)) << k3::isa_name(isa) << " n=" << n;
        }
      }
    }
    // Huge values: no NaN, no overflow.
    std::vector<float> h = {1e30f, -1e30f, 0.f, 5.f, 1e30f};
    k.softmax(h.data(), 5);
    EXPECT_EQ(h[0], 0.5f) << k3::isa_name(isa);
    EXPECT_EQ(h[1], 0.f);
    EXPECT_EQ(h[2], 0.f);
    EXPECT_EQ(h[3], 0.f);
    EXPECT_EQ(h[4], 0.5f);
    std::vector<float> m = {-1e30f, -1e30f, -1e30f};  // all very negative: uniform
    k.softmax(m.data(), 3);
    for (float v : m) EXPECT_FLOAT_EQ(v, 1.f / 3.f) << k3::isa_name(isa);
    float one = -7.f;
    k.softmax(&one, 1);
    EXPECT_EQ(one, 1.f);
    // NaN propagates (every output NaN, like k3::ref::softmax).
    for (int64_t n : {5, 40}) {
      std::vector<float> q(n, 1.f);
      q[n - 2] = kNaN;
      k.softmax(q.data(), n);
      for (float v : q) EXPECT_TRUE(std::isnan(v)) << k3::isa_name(isa) << " n=" << n;
    }
  }
}

TEST(Vec, RmsnormAndL2norm) {
  std::mt19937 g(6);
  Worst wr{"rmsnorm"}, wl{"l2norm"};
  for (k3::Isa isa : isas_under_test()) {
    const k3::KernelTable& k = k3::kernels_for(isa);
    for (int64_t n : kSizes) {
      const auto x = rand_f32(g, n, -3.f, 3.f), w = rand_f32(g, n, 0.5f, 1.5f);
      for (bool use_w : {true, false}) {
        const float* wp = use_w ? w.data() : nullptr;
        std::vector<float> y(n), r(n), ya = x;
        k.rmsnorm(x.data(), wp, 1e-6f, y.data(), n);
        k.rmsnorm(ya.data(), wp, 1e-6f, ya.data(), n);  // y == x
        k3::ref::rmsnorm(x.data(), n, wp, 1e-6f, r.data());
        for (int64_t i = 0; i < n; ++i) {
          // rmsnorm sums and scales in fp64 lanes: both it and the oracle round an fp64 value
          // (equal up to summation order, ~1e-15) once, so they agree to one ulp (2u).
          ASSERT_TRUE(near(y[i], r[i], 2 * kU, 0, &wr))
              << k3::isa_name(isa) << " n=" << n << " w=" << use_w << " i=" << i;
          ASSERT_EQ(ya[i], y[i]) << k3::isa_name(isa) << " aliased n=" << n;
        }
      }
      std::vector<float> y(n), r(n), ya = x;
      const float s = 0.125f;
      k.l2norm(x.data(), 1e-6f, s, y.data(), n);
      k.l2norm(ya.data(), 1e-6f, s, ya.data(), n);
      k3::ref::l2norm(x.data(), n, 1e-6f, r.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(near(y[i], double(r[i]) * s, norm_rel(n), 0, &wl)) << k3::isa_name(isa) << " n=" << n << " i=" << i;
        ASSERT_EQ(ya[i], y[i]) << k3::isa_name(isa) << " aliased n=" << n;
      }
    }
    // All-zero rows: eps keeps the result 0 (not NaN).
    for (int64_t n : {1, 17, 1000}) {
      std::vector<float> z(n, 0.f), y(n, 9.f), w(n, 2.f);
      k.rmsnorm(z.data(), w.data(), 1e-6f, y.data(), n);
      for (float v : y) ASSERT_EQ(v, 0.f) << k3::isa_name(isa);
      std::fill(y.begin(), y.end(), 9.f);
      k.l2norm(z.data(), 1e-6f, 1.f, y.data(), n);
      for (float v : y) ASSERT_EQ(v, 0.f) << k3::isa_name(isa);
    }
    float sentinel = 3.f;
    k.rmsnorm(&sentinel, nullptr, 1e-6f, &sentinel, 0);
    k.l2norm(&sentinel, 1e-6f, 1.f, &sentinel, 0);
    EXPECT_EQ(sentinel, 3.f);
  }
}

TEST(Vec, ShortConvSilu) {
  std::mt19937 g(7);
  Worst w{"short_conv_silu"};
  for (k3::Isa isa : isas_under_test()) {
    const k3::KernelTable& k = k3::kernels_for(isa);
    for (int64_t K : {1, 2, 3, 4, 5})  // K <= 4: register-tap strips; 5: the generic loop
      for (int64_t C : {1, 7, 128, 300, 1100})
        for (int64_t T : {1, 5, 64}) {
          const auto ext = rand_f32(g, (K - 1 + T) * C, -3.f, 3.f);
          const auto taps = rand_f32(g, K * C, -1.f, 1.f);
          std::vector<float> out(T * C, kNaN);
          k.short_conv_silu(ext.data(), taps.data(), T, C, K, out.data());
          for (int64_t t = 0; t < T; ++t)
            for (int64_t c = 0; c < C; ++c) {
              double z = 0, sa = 0;
              for (int64_t j = 0; j < K; ++j) {
                const double p = double(taps[j * C + c]) * ext[(t + j) * C + c];
                z += p;
                sa += std::fabs(p);
              }
              // fp32 sum of K products (<= K+1 roundings of <= Σ|p|), through |SiLU'| <= 1.1.
              const double abs = 1.1 * (K + 1) * kU * sa + kFlushAbs;
              ASSERT_TRUE(near(out[t * C + c], silu64(z), kSiluRel, abs, &w))
                  << k3::isa_name(isa) << " K=" << K << " C=" << C << " T=" << T << " t=" << t << " c=" << c;
            }
        }
  }
}

// gemm_nn vs an fp64 triple loop: shapes around the 4-row and 2-vector tiles, leading dimensions
// larger than the extents, accumulate on/off; cells outside [m, n] of C untouched. Each C element
// is one fp32 chain of k FMAs (or multiply-adds): |err| <= (k + 2)·u·Σ|a·b| (+ the old C value).
TEST(Vec, GemmNN) {
  std::mt19937 g(9);
  Worst w{"gemm_nn"};
  for (k3::Isa isa : isas_under_test()) {
    const k3::KernelTable& kt = k3::kernels_for(isa);
    for (int64_t m : {1, 3, 4, 5, 9, 16})
      for (int64_t n : {1, 7, 8, 15, 16, 17, 31, 32, 33, 100})
        for (int64_t k : {0, 1, 5, 48, 130})
          for (bool acc : {false, true}) {
            const int64_t lda = k + 3, ldb = n + 5, ldc = n + 2;
            const auto a = rand_f32(g, m * lda, -2.f, 2.f), b = rand_f32(g, std::max<int64_t>(k, 1) * ldb);
            const auto c0 = rand_f32(g, m * ldc);
            std::vector<float> c = c0;
            kt.gemm_nn(a.data(), lda, b.data(), ldb, c.data(), ldc, m, n, k, acc);
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < ldc; ++j) {
                if (j >= n) {
                  ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j]) << "cell outside n written";
                  continue;
                }
                double z = acc ? c0[i * ldc + j] : 0.0, sa = std::fabs(z);
                for (int64_t kk = 0; kk < k; ++kk) {
                  const double p = double(a[i * lda + kk]) * b[kk * ldb + j];
                  z += p;
                  sa += std::fabs(p);
                }
                ASSERT_TRUE(near(c[i * ldc + j], z, 0, (k + 2) * kU * sa, &w))
                    << k3::isa_name(isa) << " m=" << m << " n=" << n << " k=" << k << " acc=" << acc << " i=" << i
                    << " j=" << j;
              }
          }
  }
}

// The k3::vec entry points forward to the process-wide table (bit-identical results).
TEST(Vec, DispatchedApiMatchesActiveTable) {
  std::mt19937 g(8);
  const k3::KernelTable& k = k3::kernels();
  const int64_t n = 77;
  const auto a = rand_f32(g, n, -5.f, 5.f), b = rand_f32(g, n);
  EXPECT_EQ(k3::vec::dot(a.data(), b.data(), n), k.dot(a.data(), b.data(), n));
  EXPECT_EQ(k3::vec::sum_sq(a.data(), n), k.sum_sq(a.data(), n));
  using Fn = void (*)(const float*, float*, int64_t);
  const std::pair<Fn, Fn> pairs[] = {{k3::vec::sigmoid, k.sigmoid},
                                     {k3::vec::silu, k.silu},
                                     {k3::vec::exp, k.exp},
                                     {k3::vec::mul_sigmoid, k.mul_sigmoid}};
  for (auto [api, tab] : pairs) {
    std::vector<float> y1 = b, y2 = b;
    api(a.data(), y1.data(), n);
    tab(a.data(), y2.data(), n);
    EXPECT_EQ(y1, y2);
  }
  std::vector<float> y1 = b, y2 = b;
  k3::vec::axpy(0.5f, a.data(), y1.data(), n);
  k.axpy(0.5f, a.data(), y2.data(), n);
  EXPECT_EQ(y1, y2);
  k3::vec::scale(a.data(), 3.f, y1.data(), n);
  k.scale(a.data(), 3.f, y2.data(), n);
  EXPECT_EQ(y1, y2);
  k3::vec::rmsnorm(a.data(), b.data(), 1e-5f, y1.data(), n);
  k.rmsnorm(a.data(), b.data(), 1e-5f, y2.data(), n);
  EXPECT_EQ(y1, y2);
  k3::vec::l2norm(a.data(), 1e-5f, 2.f, y1.data(), n);
  k.l2norm(a.data(), 1e-5f, 2.f, y2.data(), n);
  EXPECT_EQ(y1, y2);
  y1 = a;
  y2 = a;
  k3::vec::softmax(y1.data(), n);
  k.softmax(y2.data(), n);
  EXPECT_EQ(y1, y2);
  const auto ext = rand_f32(g, 3 * 10 + 7 * 10), taps = rand_f32(g, 4 * 10);
  std::vector<float> o1(7 * 10), o2(7 * 10);
  k3::vec::short_conv_silu(ext.data(), taps.data(), 7, 10, 4, o1.data());
  k.short_conv_silu(ext.data(), taps.data(), 7, 10, 4, o2.data());
  EXPECT_EQ(o1, o2);
}

}  // namespace
