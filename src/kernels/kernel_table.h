// KernelTable: the per-ISA kernel entry points (raw pointers, single-threaded, no checks).
// Each ISA's translation units (scalar/, avx2/, avx512/) fill one table; dispatch.h picks one
// per process; ops.h wraps them with checks and threads. Callers use ops.h, not this header.
//
// Conventions (shapes outermost first, all row-major, strides in elements):
//   W bf16 [rows, K] (row stride ldw), X fp32 [T, K] (ldx), Y fp32 [T, rows_total] (ldy).
//   Every kernel writes Y[t, r] for t in [0, T), r in [r0, r1) only (threads split rows).
//   MXFP4 W: packed U8 [rows, K/2] (low nibble = even column), scale U8 [rows, K/32] (E8M0).
//   Q8 activations: per 32-block one fp32 scale s and 32 int8 q with x ≈ s·q, stored in
//   "nibble order": position p < 16 holds element 2p, p >= 16 holds element 2(p-16)+1, so that
//   a block's 16 low nibbles followed by its 16 high nibbles line up with q without shuffles.
//   A block whose amax is not finite gets s = NaN and q = 0 (the result is NaN, never garbage).
//   An E8M0 scale byte 0xFF yields NaN in the output (ops.cpp turns that into a k3::Error).
//
// ISA translation units must not define (or instantiate) non-static inline functions or templates
// visible to other TUs: the linker could pick an AVX-512 copy for scalar callers. Keep all
// helpers in an anonymous namespace.
#pragma once
#include <cstdint>

namespace k3 {

struct QuantMatrix;  // kernels/q8q4_trunk.h

struct KernelTable {
  const char* isa_name;

  /// Y[t, r] = Σ_k W[r, k]·X[t, k] (fp32 accumulation, the fp32 X multiplied exactly).
  void (*gemm_bf16)(const uint16_t* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t t, float* y,
                    int64_t ldy, int64_t r0, int64_t r1);

  /// Q8 quantization of one row x [n] (n % 32 == 0): s[b] = amax_b/127, q = RNE(x·127/amax_b),
  /// in nibble order. Bit-identical across ISAs.
  void (*quantize_q8)(const float* x, int64_t n, int8_t* q, float* s);

  /// Y[t, r] = Σ_b s_a[t, b]·2^(e[r,b]-128)·Σ_i T2[nib]·q[t, 32b+i] (integer block dots).
  /// q: [T, K] int8 (row stride K), qs: [T, K/32].
  void (*gemm_mxfp4_q8)(const uint8_t* packed, const uint8_t* scale, int64_t k, const int8_t* q, const float* qs,
                        int64_t t, float* y, int64_t ldy, int64_t r0, int64_t r1);

  /// BF16-product GEMM of the 'bf16' numerics mode (ops.h Numerics): W bf16 [rows, K] (ldw),
  /// XB bf16 [T, ldxb] (activations already rounded; ldxb even, >= K, element K zero when K is
  /// odd). The "pair chain" every ISA computes (vdpbf16ps's order, probed on AVX-512 BF16 CPUs):
  /// acc = 0; for p = 0, 1, ...: acc = rnd(acc + w[2p+1]·x[2p+1]); acc = rnd(acc + w[2p]·x[2p])
  /// (products of two bf16 are exact in fp32; w/x past K are 0); Y[t, r] = acc. One chain per
  /// output, so a row's bits depend on neither T nor the row range. AVX-512 BF16 flushes
  /// fp32 subnormals (DAZ/FTZ); the emulations (scalar, AVX2) keep them.
  void (*gemm_bf16_dp)(const uint16_t* w, int64_t ldw, int64_t k, const uint16_t* xb, int64_t ldxb, int64_t t, float* y,
                       int64_t ldy, int64_t r0, int64_t r1);

  /// The same pair chain with W an MXFP4 matrix (K % 32 == 0) decoded to the exact bf16 values
  /// E2M1[nib]·2^(e-127) (the 'mxfp8' mode's expert GEMM; XB holds MXFP8-quantized activations).
  void (*gemm_mxfp4_dp)(const uint8_t* packed, const uint8_t* scale, int64_t k, const uint16_t* xb, int64_t ldxb,
                        int64_t t, float* y, int64_t ldy, int64_t r0, int64_t r1);

  /// Exact-decode path: Y[t, r] = Σ_k E2M1[nib]·2^(e-127)·X[t, k] in fp32 FMA.
  void (*gemm_mxfp4_f32)(const uint8_t* packed, const uint8_t* scale, int64_t k, const float* x, int64_t ldx, int64_t t,
                         float* y, int64_t ldy, int64_t r0, int64_t r1);

  /// out[i] = β1·tanh(g[i]/β1)·σ(g[i]) · β2·tanh(u[i]/β2) (β2 <= 0: the up branch is u[i]).
  void (*situ_glu)(const float* g, const float* u, float* out, int64_t n, float beta1, float beta2);

  /// Streaming-read probe (kernels/read_bandwidth.h): Σ x[i] mod 2^64 over n 64-bit words
  /// (integer lanes: any bytes, e.g. mapped weights, read at full speed, no denormal or NaN
  /// cases; the sum is the same bits on every ISA). x is 8-byte aligned.
  uint64_t (*read_sum)(const uint64_t* x, int64_t n);

  // --- k3::vec primitives (vec.h states their contracts; vec_impl.h is the one source that
  // every ISA compiles). Single-threaded, unchecked, fp32; "may alias" = output == input exactly.
  /// Σ a[i]·b[i], fp32 partial sums (order ISA-dependent).
  float (*dot)(const float* a, const float* b, int64_t n);
  /// Σ x[i]², fp32 partial sums.
  float (*sum_sq)(const float* x, int64_t n);
  /// y[i] += a·x[i].
  void (*axpy)(float a, const float* x, float* y, int64_t n);
  /// y[i] = a·x[i] (may alias).
  void (*scale)(const float* x, float a, float* y, int64_t n);
  /// y[i] = σ(x[i]) via e = exp(−|x|) (saturates to exactly 0/1; may alias).
  void (*sigmoid)(const float* x, float* y, int64_t n);
  /// y[i] = x[i]·σ(x[i]) (may alias; SiLU(−inf) = 0).
  void (*silu)(const float* x, float* y, int64_t n);
  /// y[i] *= σ(g[i]).
  void (*mul_sigmoid)(const float* g, float* y, int64_t n);
  /// y[i] = e^{x[i]} (may alias): 0 below ln(FLT_MIN), +inf above ln(FLT_MAX), NaN propagates.
  void (*exp)(const float* x, float* y, int64_t n);
  /// In-place softmax over x [n], n >= 1 (max subtracted, fp32 sum).
  void (*softmax)(float* x, int64_t n);
  /// One online-softmax step over x [n], the first n_vis (1..n) visible; vec.h softmax_online.
  float (*softmax_online)(float* x, int64_t n_vis, int64_t n, float* m, float* l);
  /// y[i] = w[i]·x[i] / sqrt(mean(x²) + eps) (w == nullptr: no weight; may alias).
  void (*rmsnorm)(const float* x, const float* w, float eps, float* y, int64_t n);
  /// y[i] = s·x[i] / sqrt(Σ x² + eps) (may alias).
  void (*l2norm)(const float* x, float eps, float s, float* y, int64_t n);
  /// out [T, C] = SiLU(Σ_j taps[j, :]·ext[t + j, :]) with ext [K−1+T, C], taps [K, C].
  void (*short_conv_silu)(const float* ext, const float* taps, int64_t t, int64_t c, int64_t k, float* out);

  /// C [m, n] (+)= A [m, k] · B [k, n], fp32 row-major (leading dims lda, ldb, ldc); vec.h.
  void (*gemm_nn)(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t n,
                  int64_t k, bool accumulate);

  // --- KDA (kda_chunk.h, kda_decode.h state the contracts; kda_chunk_impl.h and
  // kda_decode_impl.h are the one source every ISA compiles). Heads [h0, h1) only.
  /// Chunkwise KDA (algorithms.md §1.3) for heads [h0, h1); work: Workspace::floats(chunk, K, V)
  /// floats (kda_chunk_impl.h), owned by the caller.
  void (*kda_chunk_heads)(int h0, int h1, int T, int H, int K, int V, const float* q, const float* k, const float* v,
                          const float* g, const float* beta, float* state, float* out, int chunk, float* work);
  /// One KDA decode step (algorithms.md §1.2) for heads [h0, h1); scratch: V + K floats.
  void (*kda_decode_heads)(int h0, int h1, int K, int V, const float* q, const float* k, const float* v, const float* g,
                           const float* beta, float* state, float* out, float* scratch);

  /// Rows [r0, r1) of Y = X·Wᵀ on a q8/q4 trunk matrix (q8q4_trunk.h), all T tokens, Y row stride ldy.
  void (*quant_rows)(const QuantMatrix& w, const float* x, int64_t t, float* y, int64_t ldy, int64_t r0, int64_t r1);

  /// Rows [r0, r1) (r0 % 16 == 0) of Y = Xq·Wᵀ on a Q8 trunk matrix (tiled, q8q4_trunk.h) with
  /// Q8 activations xq [T, K] (nibble order), scales xs [T, K/32] and block sums xsum [T, K/32]
  /// (Σ of the block's 32 xq): Y[t, r] = the chain acc = fma(float(Σ q_w·q_x), d[r,b]·xs[t,b], acc)
  /// over b = 0, 1, ... (exact integer block sums). The same bits on every ISA and for any T.
  void (*gemm_q8_q8)(const QuantMatrix& w, const int8_t* xq, const float* xs, const int32_t* xsum, int64_t t,
                     float* y, int64_t ldy, int64_t r0, int64_t r1);
};

const KernelTable& kernel_table_scalar();
const KernelTable& kernel_table_avx2();    ///< only call when cpu_features().avx2
const KernelTable& kernel_table_avx512();  ///< only call when cpu_features().avx512

}  // namespace k3
