// Scalar (portable C++) kernels: the fallback ISA, the baseline of the benchmarks, and the
// "reference numerics" mode: the dense and exact-MXFP4 dot products accumulate in fp64 in
// column order and SiTU is k3::ref::situ, so K3_ISA=scalar K3_MXFP4=exact reproduces the k3::ref
// oracle (what the forward-vs-reference tests need); the SIMD ISAs accumulate in fp32.
// The k3::vec primitives are the exception: they are vec_impl.h compiled for the baseline
// (portable GCC vector code, 4 lanes), fp32 like the other ISAs.
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "kernels/kernel_table.h"
#include "kernels/q8q4_trunk.h"
#include "kernels/scalar/kda_scalar.h"
#include "kernels/ref/activations.h"
#include "kernels/vec_impl.h"

namespace k3 {

namespace {

constexpr int8_t kT2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// 2^(e-128): the E8M0 scale with the 1/2 of the doubled E2M1 folded in; NaN for 0xFF.
float e8m0_half(uint32_t e) {
  if (e == 255) return std::numeric_limits<float>::quiet_NaN();
  return bits_to_f32(e >= 2 ? (e - 1) << 23 : (0x00200000u << e));
}
float bf16(const uint16_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return bits_to_f32(static_cast<uint32_t>(h) << 16);
}

void gemm_bf16(const uint16_t* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t t, float* y, int64_t ldy,
               int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const uint16_t* wr = w + r * ldw;
    for (int64_t j = 0; j < t; ++j) {
      const float* xj = x + j * ldx;
      double acc = 0.0;
      for (int64_t i = 0; i < k; ++i) acc += static_cast<double>(bf16(wr + i)) * xj[i];
      y[j * ldy + r] = static_cast<float>(acc);
    }
  }
}

void quantize_q8(const float* x, int64_t n, int8_t* q, float* s) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + 32 * b;
    float amax = 0.f;
    bool finite = true;
    for (int i = 0; i < 32; ++i) {
      if (!std::isfinite(xb[i])) finite = false;
      amax = std::fmax(amax, std::fabs(xb[i]));
    }
    int8_t* qb = q + 32 * b;
    if (!finite) {
      s[b] = std::numeric_limits<float>::quiet_NaN();
      std::memset(qb, 0, 32);
      continue;
    }
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    s[b] = amax / 127.f;
    for (int p = 0; p < 32; ++p) {
      const int i = p < 16 ? 2 * p : 2 * (p - 16) + 1;
      qb[p] = static_cast<int8_t>(std::nearbyint(xb[i] * inv));
    }
  }
}

void gemm_mxfp4_q8(const uint8_t* packed, const uint8_t* scale, int64_t k, const int8_t* q, const float* qs, int64_t t,
                   float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t nb = k / 32;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* pr = packed + r * (k / 2);
    const uint8_t* sr = scale + r * nb;
    for (int64_t j = 0; j < t; ++j) {
      const int8_t* qj = q + j * k;
      const float* sj = qs + j * nb;
      float acc = 0.f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t isum = 0;
        for (int i = 0; i < 16; ++i) {
          const uint8_t byte = pr[16 * b + i];
          isum += kT2[byte & 15] * qj[32 * b + i] + kT2[byte >> 4] * qj[32 * b + 16 + i];
        }
        acc += static_cast<float>(isum) * (e8m0_half(sr[b]) * sj[b]);
      }
      y[j * ldy + r] = acc;
    }
  }
}

void gemm_mxfp4_f32(const uint8_t* packed, const uint8_t* scale, int64_t k, const float* x, int64_t ldx, int64_t t,
                    float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t nb = k / 32;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* pr = packed + r * (k / 2);
    const uint8_t* sr = scale + r * nb;
    for (int64_t j = 0; j < t; ++j) {
      const float* xj = x + j * ldx;
      double acc = 0.0;  // same order and rounding as k3::ref::matvec_mxfp4 (2·part·2^(e-128))
      for (int64_t b = 0; b < nb; ++b) {
        double part = 0.0;
        for (int i = 0; i < 16; ++i) {
          const uint8_t byte = pr[16 * b + i];
          part += static_cast<double>(kT2[byte & 15]) * xj[32 * b + 2 * i];
          part += static_cast<double>(kT2[byte >> 4]) * xj[32 * b + 2 * i + 1];
        }
        acc += part * static_cast<double>(e8m0_half(sr[b]));
      }
      y[j * ldy + r] = static_cast<float>(acc);
    }
  }
}

// The pair chain of kernel_table.h gemm_bf16_dp: odd element first, then even, each product
// exact in fp32 (bf16 x bf16), each add rounded once (== the fused form, the product being exact).
float pair_chain(const float* w, const uint16_t* xb, int64_t k) {
  float acc = 0.f;
  for (int64_t i = 0; i < k; i += 2) {
    const float wo = i + 1 < k ? w[i + 1] : 0.f, xo = i + 1 < k ? bf16(xb + i + 1) : 0.f;
    acc = acc + wo * xo;
    acc = acc + w[i] * bf16(xb + i);
  }
  return acc;
}

void gemm_bf16_dp(const uint16_t* w, int64_t ldw, int64_t k, const uint16_t* xb, int64_t ldxb, int64_t t, float* y,
                  int64_t ldy, int64_t r0, int64_t r1) {
  std::vector<float> wr(static_cast<size_t>(k));
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t i = 0; i < k; ++i) wr[i] = bf16(w + r * ldw + i);
    for (int64_t j = 0; j < t; ++j) y[j * ldy + r] = pair_chain(wr.data(), xb + j * ldxb, k);
  }
}

void gemm_mxfp4_dp(const uint8_t* packed, const uint8_t* scale, int64_t k, const uint16_t* xb, int64_t ldxb, int64_t t,
                   float* y, int64_t ldy, int64_t r0, int64_t r1) {
  std::vector<float> wr(static_cast<size_t>(k));
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t i = 0; i < k; ++i) {
      const uint8_t byte = packed[r * (k / 2) + i / 2];
      const int nib = (i & 1) ? byte >> 4 : byte & 15;
      // E2M1 value x 2^(e-127) = (doubled E2M1) x 2^(e-128), exact
      wr[i] = static_cast<float>(kT2[nib]) * e8m0_half(scale[r * (k / 32) + i / 32]);
      if (nib == 8 && !std::isnan(wr[i])) wr[i] = -0.f;  // E2M1 code 8 is -0 (as vdpbf16ps sees it)
    }
    for (int64_t j = 0; j < t; ++j) y[j * ldy + r] = pair_chain(wr.data(), xb + j * ldxb, k);
  }
}

void situ_glu(const float* g, const float* u, float* out, int64_t n, float beta1, float beta2) {
  const std::optional<float> lb = beta2 > 0.f ? std::optional<float>(beta2) : std::nullopt;
  for (int64_t i = 0; i < n; ++i) out[i] = ref::situ(g[i], u[i], beta1, lb);
}

uint64_t read_sum(const uint64_t* x, int64_t n) {
  uint64_t a[4] = {0, 0, 0, 0};  // independent chains (wrapping adds: the order changes no bit)
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int l = 0; l < 4; ++l) a[l] += x[i + l];
  uint64_t s = a[0] + a[1] + a[2] + a[3];
  for (; i < n; ++i) s += x[i];
  return s;
}

}  // namespace

const KernelTable& kernel_table_scalar() {
  static const KernelTable t = [] {
    KernelTable k{};
    k.isa_name = "scalar";
    k.gemm_bf16 = gemm_bf16;
    k.quantize_q8 = quantize_q8;
    k.gemm_mxfp4_q8 = gemm_mxfp4_q8;
    k.gemm_mxfp4_f32 = gemm_mxfp4_f32;
    k.gemm_bf16_dp = gemm_bf16_dp;
    k.gemm_mxfp4_dp = gemm_mxfp4_dp;
    k.situ_glu = situ_glu;
    k.read_sum = read_sum;
    k.kda_chunk_heads = scalar::kda_chunk_heads;
    k.kda_decode_heads = scalar::kda_decode_heads;
    k.quant_rows = detail::quant_rows_scalar;
    k.gemm_q8_q8 = detail::gemm_q8_q8_scalar;
    vec_fill_table(k);  // vec_impl.h built for the x86-64 baseline (4-lane SSE2 vectors)
    return k;
  }();
  return t;
}

}  // namespace k3
