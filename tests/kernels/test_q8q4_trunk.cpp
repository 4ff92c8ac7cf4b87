// Trunk quantization kernels (kernels/q8q4_trunk.h): the encoder against its definition, the
// scalar and AVX2 rows against the fp64 oracle ref::matmul_quant on awkward shapes, and a token's
// result independent of the token count (bit for bit).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "kernels/cpu_features.h"
#include "kernels/dispatch.h"
#include "kernels/exec_config.h"
#include "kernels/kernel_table.h"
#include "kernels/q8q4_trunk.h"

namespace {

struct Bf16Matrix {
  std::vector<uint16_t> bits;
  k3::TensorView view;
  Bf16Matrix(int64_t rows, int64_t cols, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f / std::sqrt(static_cast<float>(cols)));
    bits.resize(static_cast<size_t>(rows * cols));
    for (auto& b : bits) b = k3::f32_to_bf16(nd(rng));
    bits[3] = k3::f32_to_bf16(0.f);
    view.name = "test.weight";
    view.dtype = k3::DType::BF16;
    view.shape = {rows, cols};
    view.data = reinterpret_cast<const uint8_t*>(bits.data());
    view.nbytes = bits.size() * 2;
  }
  float at(int64_t r, int64_t c) const { return k3::bf16_to_f32(bits[static_cast<size_t>(r * view.shape[1] + c)]); }
};

std::vector<float> randx(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

float decoded(const k3::QuantMatrix& m, int64_t r, int64_t j) {
  const float d = m.scale(r, j / 32);
  if (m.kind == k3::QuantKind::Q8) return d * m.q8(r, j);
  const uint8_t b = static_cast<uint8_t>(m.q[static_cast<size_t>((r * m.cols + j) / 2)]);
  const int n = j % 2 == 0 ? (b & 15) : (b >> 4);
  return d * static_cast<float>(n >= 8 ? n - 16 : n);
}

}  // namespace

TEST(TrunkQuant, EncoderWithinHalfAStep) {
  const Bf16Matrix w(13, 96, 1);
  for (k3::QuantKind kind : {k3::QuantKind::Q8, k3::QuantKind::Q4}) {
    const k3::QuantMatrix m = k3::quantize_matrix(w.view, kind);
    const float qmax = kind == k3::QuantKind::Q8 ? 127.f : 7.f;
    // Q8: rows padded to the 16-row tile (q8q4_trunk.h), padding zero.
    ASSERT_EQ(m.d.size(), kind == k3::QuantKind::Q8 ? 16u * 3 : 13u * 3);
    ASSERT_EQ(m.q.size(), kind == k3::QuantKind::Q8 ? 16u * 96 : 13u * 48);
    if (kind == k3::QuantKind::Q8)
      for (int64_t r = 13; r < 16; ++r)
        for (int64_t j = 0; j < 96; ++j) {
          EXPECT_EQ(m.q8(r, j), 0);
          EXPECT_EQ(m.scale(r, j / 32), 0.f);
        }
    for (int64_t r = 0; r < 13; ++r)
      for (int64_t g = 0; g < 3; ++g) {
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(w.at(r, g * 32 + i)));
        const float d = m.scale(r, g);
        EXPECT_FLOAT_EQ(d, amax / qmax);
        for (int i = 0; i < 32; ++i) {
          const float v = w.at(r, g * 32 + i), q = decoded(m, r, g * 32 + i);
          EXPECT_LE(std::fabs(q - v), 0.5f * d * 1.0001f) << r << " " << g * 32 + i;
          EXPECT_NEAR(q / d, std::nearbyint(v / d), 1e-3);  // RNE of w/d, exactly representable
        }
      }
  }
}

TEST(TrunkQuant, EncoderErrors) {
  Bf16Matrix w(4, 40, 2);  // 40 columns: not a multiple of 32
  EXPECT_THROW(k3::quantize_matrix(w.view, k3::QuantKind::Q8), k3::Error);
  Bf16Matrix n(2, 32, 3);
  n.bits[5] = 0x7FC0;  // NaN
  try {
    k3::quantize_matrix(n.view, k3::QuantKind::Q4);
    ADD_FAILURE();
  } catch (const k3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("test.weight"), std::string::npos);
  }
}

// Scalar and AVX2 rows vs the fp64 oracle: |y - ref| <= 1e-5 * sum |w x| per output (fp32
// accumulation over up to 224 terms); a token's output identical for T = 1 and inside T = 9.
TEST(TrunkQuant, RowsMatchOracleOnEveryIsa) {
  const bool has_avx2 = k3::cpu_features().avx2;  // AVX2 + FMA + F16C
  for (int64_t cols : {32, 96, 224})
    for (k3::QuantKind kind : {k3::QuantKind::Q8, k3::QuantKind::Q4}) {
      const int64_t rows = 37;
      const Bf16Matrix w(rows, cols, static_cast<unsigned>(cols));
      const k3::QuantMatrix m = k3::quantize_matrix(w.view, kind);
      for (int64_t T : {1, 3, 9}) {
        const auto x = randx(static_cast<size_t>(T * cols), 7);
        std::vector<float> want(static_cast<size_t>(T * rows)), got(want.size());
        k3::ref::matmul_quant(m, x.data(), T, want.data());
        for (int isa = 0; isa < 2; ++isa) {
          if (isa == 1 && !has_avx2) continue;
          SCOPED_TRACE(std::to_string(cols) + " cols, T " + std::to_string(T) + (isa ? " avx2" : " scalar"));
          if (isa == 0) k3::detail::quant_rows_scalar(m, x.data(), T, got.data(), rows, 0, rows);
          else k3::detail::quant_rows_avx2(m, x.data(), T, got.data(), rows, 0, rows);
          for (int64_t t = 0; t < T; ++t)
            for (int64_t r = 0; r < rows; ++r) {
              double mag = 0;
              for (int64_t j = 0; j < cols; ++j)
                mag += std::fabs(decoded(m, r, j) * x[static_cast<size_t>(t * cols + j)]);
              EXPECT_NEAR(got[static_cast<size_t>(t * rows + r)], want[static_cast<size_t>(t * rows + r)],
                          1e-5 * mag + 1e-30);
            }
          // Token t alone gives the same bits as inside the batch.
          for (int64_t t = 0; t < T; ++t) {
            std::vector<float> one(static_cast<size_t>(rows));
            if (isa == 0) k3::detail::quant_rows_scalar(m, x.data() + t * cols, 1, one.data(), rows, 0, rows);
            else k3::detail::quant_rows_avx2(m, x.data() + t * cols, 1, one.data(), rows, 0, rows);
            EXPECT_EQ(std::memcmp(one.data(), got.data() + t * rows, rows * sizeof(float)), 0);
          }
        }
      }
      // The dispatched, threaded entry equals the oracle within the same bound on T = 5.
      const auto x = randx(static_cast<size_t>(5 * cols), 8);
      std::vector<float> want(static_cast<size_t>(5 * rows)), got(want.size());
      k3::ref::matmul_quant(m, x.data(), 5, want.data());
      k3::matmul_quant(m, x.data(), 5, got.data());
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i])));
    }
}

namespace {

// The q8 trunk's int8 kernels (kernel_table.h gemm_q8_q8) evaluated from the definition: the
// activations quantized by the scalar table's quantize_q8, exact integer block sums, then
// acc = fma(float(sum), d·s, acc) in block order.
std::vector<float> q8q8_definition(const k3::QuantMatrix& m, const std::vector<int8_t>& xq, const std::vector<float>& xs,
                                   int64_t T) {
  const int64_t K = m.cols, G = K / 32;
  std::vector<float> y(static_cast<size_t>(T * m.rows));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = 0; r < m.rows; ++r) {
      float acc = 0.f;
      for (int64_t b = 0; b < G; ++b) {
        int32_t s = 0;
        for (int p = 0; p < 32; ++p) {
          const int e = p < 16 ? 2 * p : 2 * (p - 16) + 1;  // nibble order of the activations
          s += m.q8(r, b * 32 + e) * xq[static_cast<size_t>(t * K + b * 32 + p)];
        }
        acc = std::fma(static_cast<float>(s), m.scale(r, b) * xs[static_cast<size_t>(t * G + b)], acc);
      }
      y[static_cast<size_t>(t * m.rows + r)] = acc;
    }
  return y;
}

struct Q8Acts {
  std::vector<int8_t> q;
  std::vector<float> s;
  std::vector<int32_t> sum;
};
Q8Acts quantize_acts(const std::vector<float>& x, int64_t T, int64_t K) {
  Q8Acts a;
  a.q.resize(static_cast<size_t>(T * K));
  a.s.resize(static_cast<size_t>(T * K / 32));
  a.sum.resize(a.s.size());
  for (int64_t t = 0; t < T; ++t)
    k3::kernel_table_scalar().quantize_q8(x.data() + t * K, K, a.q.data() + t * K, a.s.data() + t * K / 32);
  for (size_t b = 0; b < a.sum.size(); ++b)
    for (int i = 0; i < 32; ++i) a.sum[b] += a.q[b * 32 + i];
  return a;
}

}  // namespace

// Every ISA's int8 kernel (on AVX-512 both the VNNI and, where the CPU and OS grant it, the AMX
// kernel) equals the definition bit for bit, for T = 1..40, on row counts that
// are not multiples of the 16-row tile, on K3-like widths, and on 16-aligned row ranges; so a
// token's outputs do not depend on the batch (the definition is per (row, token)).
TEST(TrunkQuant, Q8Int8KernelsMatchDefinitionEveryIsaAndT) {
  struct Shape {
    int64_t rows, cols;
  };
  for (const Shape sh : {Shape{37, 96}, Shape{16, 32}, Shape{50, 1024}, Shape{5, 7168}}) {
    const Bf16Matrix w(sh.rows, sh.cols, static_cast<unsigned>(sh.rows + sh.cols));
    const k3::QuantMatrix m = k3::quantize_matrix(w.view, k3::QuantKind::Q8);
    const int64_t Tmax = sh.cols >= 7168 ? 17 : 40;
    auto x = randx(static_cast<size_t>(Tmax * sh.cols), 11);
    x[5] = 0.f;
    for (int i = 0; i < 32; ++i) x[static_cast<size_t>(sh.cols + i)] = 0.f;  // an all-zero block (s = 0)
    x[7] = 60.f;                                                             // one large block max
    const Q8Acts a = quantize_acts(x, Tmax, sh.cols);
    const auto want = q8q8_definition(m, a.q, a.s, Tmax);
    for (k3::Isa isa : k3::supported_isas()) {
      const k3::KernelTable& kt = k3::kernels_for(isa);
      for (int64_t T = 1; T <= Tmax; ++T) {
        std::vector<float> got(static_cast<size_t>(T * sh.rows), -1.f);
        kt.gemm_q8_q8(m, a.q.data(), a.s.data(), a.sum.data(), T, got.data(), sh.rows, 0, sh.rows);
        // (the first T tokens of the definition: it is per token)
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
            << kt.isa_name << " rows " << sh.rows << " cols " << sh.cols << " T " << T;
      }
      if (isa == k3::Isa::Avx512) {  // both halves of the AVX-512 kernel: VNNI, and AMX where granted
        for (int amx = 0; amx < 2; ++amx) {
          if (amx == 1 && !k3::detail::q8_amx_available()) continue;
          for (int64_t T = 1; T <= Tmax; ++T) {
            std::vector<float> got(static_cast<size_t>(T * sh.rows), -1.f);
            (amx ? k3::detail::gemm_q8_q8_amx : k3::detail::gemm_q8_q8_avx512_vnni)(
                m, a.q.data(), a.s.data(), a.sum.data(), T, got.data(), sh.rows, 0, sh.rows);
            ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
                << (amx ? "amx" : "vnni") << " rows " << sh.rows << " cols " << sh.cols << " T " << T;
          }
        }
      }
      if (sh.rows > 16) {  // a 16-aligned row range writes exactly its rows
        std::vector<float> got(static_cast<size_t>(3 * sh.rows), -1.f);
        kt.gemm_q8_q8(m, a.q.data(), a.s.data(), a.sum.data(), 3, got.data(), sh.rows, 16, sh.rows);
        for (int64_t t = 0; t < 3; ++t)
          for (int64_t r = 0; r < sh.rows; ++r)
            EXPECT_EQ(got[static_cast<size_t>(t * sh.rows + r)],
                      r < 16 ? -1.f : want[static_cast<size_t>(t * sh.rows + r)])
                << kt.isa_name << " t " << t << " r " << r;
      }
    }
  }
}

// The threaded int8 entry: equal to the definition, batch invariant, within the activation
// rounding bound of the fp64 oracle (per block 0.5·s·Σ|d·q_w| plus fp32 accumulation), NaN for a
// non-finite activation; matmul_quant takes it in the int8 numerics mode only.
TEST(TrunkQuant, Q8Int8PathBoundAndDispatch) {
  const int64_t rows = 70, cols = 320, T = 21;
  const Bf16Matrix w(rows, cols, 5);
  const k3::QuantMatrix m = k3::quantize_matrix(w.view, k3::QuantKind::Q8);
  const auto x = randx(static_cast<size_t>(T * cols), 12);
  const Q8Acts a = quantize_acts(x, T, cols);
  const auto def = q8q8_definition(m, a.q, a.s, T);
  std::vector<float> got(static_cast<size_t>(T * rows)), one(static_cast<size_t>(rows)), oracle(got.size());
  k3::matmul_quant_q8(m, x.data(), T, got.data());
  EXPECT_EQ(std::memcmp(got.data(), def.data(), got.size() * 4), 0);
  for (int64_t t = 0; t < T; ++t) {
    k3::matmul_quant_q8(m, x.data() + t * cols, 1, one.data());
    EXPECT_EQ(std::memcmp(one.data(), got.data() + t * rows, rows * 4), 0) << "token " << t;
  }
  k3::ref::matmul_quant(m, x.data(), T, oracle.data());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      double bound = 0, mag = 0;
      for (int64_t b = 0; b < cols / 32; ++b)
        for (int i = 0; i < 32; ++i) {
          const double wd = std::fabs(static_cast<double>(decoded(m, r, b * 32 + i)));
          bound += 0.5 * a.s[static_cast<size_t>(t * cols / 32 + b)] * wd;
          mag += wd * std::fabs(x[static_cast<size_t>(t * cols + b * 32 + i)]);
        }
      const size_t i = static_cast<size_t>(t * rows + r);
      EXPECT_LE(std::fabs(got[i] - oracle[i]), bound * 1.0001 + 1e-6 * mag) << t << " " << r;
      EXPECT_GT(bound, 0.0);
    }
  // Dispatch: int8 mode -> int8 path; exact -> fp32 path.
  std::vector<float> y(got.size());
  {
    k3::ExecConfig ec;
    ec.numerics = k3::Numerics::Int8;
    const k3::ExecContext ctx = k3::resolve_exec_config(ec);
    const k3::ExecScope scope(ctx);
    k3::matmul_quant(m, x.data(), T, y.data());
    EXPECT_EQ(std::memcmp(y.data(), got.data(), y.size() * 4), 0);
  }
  {
    k3::ExecConfig ec;
    ec.numerics = k3::Numerics::Exact;
    const k3::ExecContext ctx = k3::resolve_exec_config(ec);
    const k3::ExecScope scope(ctx);
    std::vector<float> f32(got.size());
    k3::matmul_quant_f32(m, x.data(), T, f32.data());
    k3::matmul_quant(m, x.data(), T, y.data());
    EXPECT_EQ(std::memcmp(y.data(), f32.data(), y.size() * 4), 0);
  }
  // A non-finite activation makes its token's outputs NaN (never garbage); others unaffected.
  auto bad = x;
  bad[static_cast<size_t>(2 * cols + 40)] = std::numeric_limits<float>::infinity();
  k3::matmul_quant_q8(m, bad.data(), T, y.data());
  for (int64_t r = 0; r < rows; ++r) EXPECT_TRUE(std::isnan(y[static_cast<size_t>(2 * rows + r)]));
  EXPECT_EQ(std::memcmp(y.data(), got.data(), 2 * rows * 4), 0);
  // Q4 has no int8 path.
  const k3::QuantMatrix q4 = k3::quantize_matrix(w.view, k3::QuantKind::Q4);
  EXPECT_THROW(k3::matmul_quant_q8(q4, x.data(), 1, y.data()), k3::Error);
}
