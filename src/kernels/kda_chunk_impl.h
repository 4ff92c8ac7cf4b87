// Chunkwise KDA, the per-head work (algorithms.md §1.3-§1.4; equations in kda_chunk.h).
// Included by kda_chunk.cpp (baseline x86-64 build) and by avx2/kda_chunk.cpp (compiled with
// AVX2 + FMA): one source, two instruction sets. Everything here has internal linkage (anonymous
// namespace), as the ISA translation-unit rule of kernel_table.h requires.
// Every per-row quantity is computed with a summation order that depends only on the row index
// (never on the chunk length n), which is what makes causality and split invariance bitwise.
#pragma once
#include <immintrin.h>
#include <math.h>

#include <cstddef>

#include "kernels/kda_chunk.h"
#include "kernels/simd_lanes.h"

// The 32-byte vector type below is passed between internal inline helpers only; GCC's note that
// its ABI differs without AVX concerns external calls, of which there are none.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace k3 {
namespace {

using std::size_t;

// Native-width float vectors (simd_lanes.h): 8 lanes in the AVX2 build, 4 in the baseline build;
// fmadd is one fused multiply-add in the AVX2 + FMA build.
using simd::fmadd;
using simd::kLanes;
using simd::loadv;
using simd::storev;
using simd::vf;

// Dot product with 32 fixed partial sums (four independent vector chains; deterministic).
inline float dot(const float* __restrict a, const float* __restrict b, int n) {
  constexpr int kV = 32 / kLanes;
  vf acc[kV];
  for (int t = 0; t < kV; ++t) acc[t] = vf{};
  int d = 0;
  for (; d + 32 <= n; d += 32)
    for (int t = 0; t < kV; ++t) acc[t] = fmadd(loadv(a + d + kLanes * t), loadv(b + d + kLanes * t), acc[t]);
  for (int t = 1; t < kV; ++t) acc[0] += acc[t];
  float s = 0.0f;
  for (int l = 0; l < kLanes; ++l) s += acc[0][l];
  for (; d < n; ++d) s += a[d] * b[d];
  return s;
}

// Register tile of C [MR rows, kLanes*NV columns] += A [MR, kd] B [kd, kLanes*NV].
template <int MR, int NV>
inline void gemm_tile(int kd, const float* __restrict A, size_t lda, const float* __restrict B, size_t ldb,
                      float* __restrict C, size_t ldc) {
  vf c[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int t = 0; t < NV; ++t) c[i][t] = loadv(C + i * ldc + kLanes * t);
  for (int p = 0; p < kd; ++p) {
    vf b[NV];
    for (int t = 0; t < NV; ++t) b[t] = loadv(B + p * ldb + kLanes * t);
    for (int i = 0; i < MR; ++i) {
      const float a = A[i * lda + p];
      for (int t = 0; t < NV; ++t) c[i][t] = fmadd(vf{} + a, b[t], c[i][t]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int t = 0; t < NV; ++t) storev(C + i * ldc + kLanes * t, c[i][t]);
}

// C [M, N] += A [M, kd] B [kd, N] (row-major, leading dimensions lda, ldb, ldc). Every element is
// updated as c = c + a_p * b_p for p = 0, 1, ..., kd-1 in the same vector form whatever M is, so a
// row's result never depends on how many other rows are computed with it (bitwise causality).
inline void gemm_acc(int M, int N, int kd, const float* A, size_t lda, const float* B, size_t ldb, float* C,
                     size_t ldc) {
  constexpr int kTile = 2 * kLanes;
  int j = 0;
  for (; j + kTile <= N; j += kTile) {
    int i = 0;
    for (; i + 4 <= M; i += 4) gemm_tile<4, 2>(kd, A + i * lda, lda, B + j, ldb, C + i * ldc + j, ldc);
  }
  // Rows left over by the 4-row tiles: one row at a time, 4 vectors wide for enough independent
  // accumulation chains.
  const int m4 = M - M % 4;
  for (int i = m4; i < M; ++i) {
    int jj = 0;
    for (; jj + 4 * kLanes <= j; jj += 4 * kLanes)
      gemm_tile<1, 4>(kd, A + i * lda, lda, B + jj, ldb, C + i * ldc + jj, ldc);
    for (; jj < j; jj += kLanes) gemm_tile<1, 1>(kd, A + i * lda, lda, B + jj, ldb, C + i * ldc + jj, ldc);
  }
  for (; j + kLanes <= N; j += kLanes)
    for (int i = 0; i < M; ++i) gemm_tile<1, 1>(kd, A + i * lda, lda, B + j, ldb, C + i * ldc + j, ldc);
  for (; j < N; ++j)  // column tail (N % kLanes != 0): scalar, still in p order
    for (int i = 0; i < M; ++i) {
      float c = C[i * ldc + j];
      for (int p = 0; p < kd; ++p) c += A[i * lda + p] * B[p * ldb + j];
      C[i * ldc + j] = c;
    }
}

// Scratch for one chunk of one head (C = chunk rows), carved from a caller-owned float buffer of
// Workspace::floats(C, K, V) elements (no allocation here: ISA translation units instantiate no
// library templates).
struct Workspace {
  int C, K, V;
  float *q, *k, *v, *alpha, *beta;  // [C,K] [C,K] [C,V] [C,K] [C]
  float *qp, *kp, *ksufT;           // q.*P, k.*P [C,K]; (k.*exp(Gamma_n - Gamma))^T [K,C]
  float* pfx;                       // P_r (inclusive prefix product)        [C,K]
  float *L, *A;                     // -L and Aqk, [C,C] row-major
  float *x, *y, *u;                 // (K.*P)S0, (Q.*P)S0 then O, U          [C,V]
  float *ks, *qs, *kbT, *w;         // sub-block scratch [16,K] [16,K] [K,C] [K]
  Workspace(int C_, int K_, int V_, float* buf) : C(C_), K(K_), V(V_) {
    const size_t ck = static_cast<size_t>(C) * K, cv = static_cast<size_t>(C) * V;
    const size_t sk = static_cast<size_t>(kKdaSubBlock) * K, cc = static_cast<size_t>(C) * C;
    float* p = buf;
    auto take = [&p](size_t n) {
      float* r = p;
      p += n;
      return r;
    };
    q = take(ck);
    k = take(ck);
    v = take(cv);
    alpha = take(ck);
    beta = take(static_cast<size_t>(C));
    qp = take(ck);
    kp = take(ck);
    ksufT = take(ck);
    pfx = take(ck);
    L = take(cc);
    A = take(cc);
    x = take(cv);
    y = take(cv);
    u = take(cv);
    ks = take(sk);
    qs = take(sk);
    kbT = take(ck);
    w = take(static_cast<size_t>(K));
  }
  static size_t floats(int C, int K, int V) {
    const size_t ck = static_cast<size_t>(C) * K, cv = static_cast<size_t>(C) * V;
    return 8 * ck + 4 * cv + static_cast<size_t>(C) + 2 * static_cast<size_t>(C) * C +
           2 * static_cast<size_t>(kKdaSubBlock) * K + static_cast<size_t>(K);
  }
};

inline int imin(int a, int b) { return a < b ? a : b; }

// Pair matrices: ws.L = -L (strictly lower, L scaled by beta_i) and ws.A = Aqk (lower incl.
// diagonal), §1.3 B / §1.4. Entries above the diagonal are never read.
void pair_matrices(Workspace& ws, int n) {
  const int K = ws.K, C = ws.C;
  for (int r0 = 0; r0 < n; r0 += kKdaSubBlock) {
    const int r1 = imin(n, r0 + kKdaSubBlock);
    // Rows of this sub-block scaled by exp(Gamma_i - Gamma_{r0-1}) = prod_{s=r0..i} alpha_s: the
    // local prefix products lp_i are first built in the qs rows.
    for (int i = r0; i < r1; ++i) {
      const float* al = &ws.alpha[static_cast<size_t>(i) * K];
      float* lp = &ws.qs[static_cast<size_t>(i - r0) * K];
      if (i == r0) {
        for (int d = 0; d < K; ++d) lp[d] = al[d];
      } else {
        const float* prev = lp - K;
        for (int d = 0; d < K; ++d) lp[d] = prev[d] * al[d];
      }
    }
    // qs now holds prefix products lp_i; form ks = k .* lp, qs = q .* lp (in place).
    for (int i = r0; i < r1; ++i) {
      float* qs = &ws.qs[static_cast<size_t>(i - r0) * K];
      float* ks = &ws.ks[static_cast<size_t>(i - r0) * K];
      const float* qi = &ws.q[static_cast<size_t>(i) * K];
      const float* ki = &ws.k[static_cast<size_t>(i) * K];
      for (int d = 0; d < K; ++d) {
        ks[d] = ki[d] * qs[d];
        qs[d] = qi[d] * qs[d];
      }
    }
    // Off-diagonal: earlier rows j < r0 scaled by exp(Gamma_{r0-1} - Gamma_j) = prod_{s=j+1..r0-1}.
    if (r0 > 0) {
      float* sb = &ws.w[0];
      for (int d = 0; d < K; ++d) sb[d] = 1.0f;
      for (int j = r0 - 1; j >= 0; --j) {
        if (j < r0 - 1) {
          const float* al = &ws.alpha[static_cast<size_t>(j + 1) * K];
          for (int d = 0; d < K; ++d) sb[d] *= al[d];
        }
        const float* kj = &ws.k[static_cast<size_t>(j) * K];
        for (int d = 0; d < K; ++d) ws.kbT[static_cast<size_t>(d) * C + j] = kj[d] * sb[d];
      }
      // [rows of this sub-block] x [earlier rows] as two small GEMMs over the key channels.
      const int m = r1 - r0;
      for (int i = r0; i < r1; ++i)
        for (int j = 0; j < r0; ++j) {
          ws.L[static_cast<size_t>(i) * C + j] = 0.0f;
          ws.A[static_cast<size_t>(i) * C + j] = 0.0f;
        }
      gemm_acc(m, r0, K, ws.ks, static_cast<size_t>(K), ws.kbT, static_cast<size_t>(C),
               &ws.L[static_cast<size_t>(r0) * C], static_cast<size_t>(C));
      gemm_acc(m, r0, K, ws.qs, static_cast<size_t>(K), ws.kbT, static_cast<size_t>(C),
               &ws.A[static_cast<size_t>(r0) * C], static_cast<size_t>(C));
      for (int i = r0; i < r1; ++i) {
        float* Li = &ws.L[static_cast<size_t>(i) * C];
        const float bi = ws.beta[i];
        for (int j = 0; j < r0; ++j) Li[j] = -(bi * Li[j]);
      }
    }
    // Diagonal sub-block, elementwise: factor for (i, j) = prod_{s=j+1..i} alpha_s (running
    // product).
    for (int j = r0; j < r1; ++j) {
      const float* kj = &ws.k[static_cast<size_t>(j) * K];
      float* w = &ws.w[0];
      for (int d = 0; d < K; ++d) w[d] = kj[d];
      ws.A[static_cast<size_t>(j) * C + j] = dot(&ws.q[static_cast<size_t>(j) * K], w, K);
      ws.L[static_cast<size_t>(j) * C + j] = 0.0f;
      for (int i = j + 1; i < r1; ++i) {
        const float* al = &ws.alpha[static_cast<size_t>(i) * K];
        for (int d = 0; d < K; ++d) w[d] *= al[d];
        ws.L[static_cast<size_t>(i) * C + j] = -(ws.beta[i] * dot(&ws.k[static_cast<size_t>(i) * K], w, K));
        ws.A[static_cast<size_t>(i) * C + j] = dot(&ws.q[static_cast<size_t>(i) * K], w, K);
      }
    }
  }
}

// One chunk of n rows of one head: S (K x V, K-major) is S0 on entry, the next state on return.
void chunk_head(Workspace& ws, int n, float* __restrict S) {
  const int K = ws.K, V = ws.V, C = ws.C;
  // Prefix products P_r and the row scalings q.*P, k.*P.
  for (int r = 0; r < n; ++r) {
    const float* al = &ws.alpha[static_cast<size_t>(r) * K];
    float* p = &ws.pfx[static_cast<size_t>(r) * K];
    const float* pp = r ? &ws.pfx[static_cast<size_t>(r - 1) * K] : nullptr;
    for (int d = 0; d < K; ++d) p[d] = pp ? pp[d] * al[d] : al[d];
    const float* qr = &ws.q[static_cast<size_t>(r) * K];
    const float* kr = &ws.k[static_cast<size_t>(r) * K];
    float* qp = &ws.qp[static_cast<size_t>(r) * K];
    float* kp = &ws.kp[static_cast<size_t>(r) * K];
    for (int d = 0; d < K; ++d) {
      qp[d] = qr[d] * p[d];
      kp[d] = kr[d] * p[d];
    }
  }
  pair_matrices(ws, n);
  // X = (K.*P) S0 and Y = (Q.*P) S0.
  for (size_t e = 0; e < static_cast<size_t>(n) * V; ++e) {
    ws.x[e] = 0.0f;
    ws.y[e] = 0.0f;
  }
  gemm_acc(n, V, K, ws.kp, static_cast<size_t>(K), S, static_cast<size_t>(V), ws.x, static_cast<size_t>(V));
  gemm_acc(n, V, K, ws.qp, static_cast<size_t>(K), S, static_cast<size_t>(V), ws.y, static_cast<size_t>(V));
  // U = (I + L)^-1 Diag(beta) (V - X) by forward substitution, row by row; O = Y + Aqk U (into y).
  for (int i = 0; i < n; ++i) {
    float* ui = &ws.u[static_cast<size_t>(i) * V];
    const float* vi = &ws.v[static_cast<size_t>(i) * V];
    const float* xi = &ws.x[static_cast<size_t>(i) * V];
    const float bi = ws.beta[i];
    for (int j = 0; j < V; ++j) ui[j] = bi * (vi[j] - xi[j]);
    gemm_acc(1, V, i, &ws.L[static_cast<size_t>(i) * C], 0, ws.u, static_cast<size_t>(V), ui, 0);
    gemm_acc(1, V, i + 1, &ws.A[static_cast<size_t>(i) * C], 0, ws.u, static_cast<size_t>(V),
             &ws.y[static_cast<size_t>(i) * V], 0);
  }
  // Hand-off: S = Diag(P_n) S0 + (K .* exp(Gamma_n - Gamma))^T U, exp(Gamma_n - Gamma_r) as the
  // suffix product prod_{s=r+1..n-1} alpha_s (stored transposed, [K, C]).
  {
    float* suf = &ws.w[0];
    for (int d = 0; d < K; ++d) suf[d] = 1.0f;
    for (int r = n - 1; r >= 0; --r) {
      if (r < n - 1) {
        const float* al = &ws.alpha[static_cast<size_t>(r + 1) * K];
        for (int d = 0; d < K; ++d) suf[d] *= al[d];
      }
      const float* kr = &ws.k[static_cast<size_t>(r) * K];
      for (int d = 0; d < K; ++d) ws.ksufT[static_cast<size_t>(d) * C + r] = kr[d] * suf[d];
    }
  }
  const float* pn = &ws.pfx[static_cast<size_t>(n - 1) * K];
  for (int d = 0; d < K; ++d) {
    float* s = S + static_cast<size_t>(d) * V;
    const float a = pn[d];
    for (int j = 0; j < V; ++j) s[j] *= a;
  }
  gemm_acc(K, V, n, ws.ksufT, static_cast<size_t>(C), ws.u, static_cast<size_t>(V), S, static_cast<size_t>(V));
}

// Heads [h0, h1) over all T tokens; arguments as kda_chunk (validated by the caller);
// work: Workspace::floats(chunk, K, V) floats of scratch.
void kda_chunk_heads_impl(int h0, int h1, int T, int H, int K, int V, const float* q, const float* k, const float* v,
                          const float* g, const float* beta, float* state, float* out, int chunk, float* work) {
  const size_t hk = static_cast<size_t>(H) * K, hv = static_cast<size_t>(H) * V;
  Workspace ws(chunk, K, V, work);
  for (int h = h0; h < h1; ++h) {
    float* S = state + static_cast<size_t>(h) * K * V;
    for (int c0 = 0; c0 < T; c0 += chunk) {
      const int n = imin(chunk, T - c0);
      for (int r = 0; r < n; ++r) {
        const size_t t = static_cast<size_t>(c0 + r);
        const size_t ok = t * hk + static_cast<size_t>(h) * K;
        const size_t ov = t * hv + static_cast<size_t>(h) * V;
        float* qr = &ws.q[static_cast<size_t>(r) * K];
        float* kr = &ws.k[static_cast<size_t>(r) * K];
        float* vr = &ws.v[static_cast<size_t>(r) * V];
        float* al = &ws.alpha[static_cast<size_t>(r) * K];
        for (int d = 0; d < K; ++d) {
          qr[d] = q[ok + d];
          kr[d] = k[ok + d];
          al[d] = expf(g[ok + d]);
        }
        for (int j = 0; j < V; ++j) vr[j] = v[ov + j];
        ws.beta[r] = beta[t * H + h];
      }
      chunk_head(ws, n, S);
      for (int r = 0; r < n; ++r) {
        const size_t ov = static_cast<size_t>(c0 + r) * hv + static_cast<size_t>(h) * V;
        const float* yr = &ws.y[static_cast<size_t>(r) * V];
        for (int j = 0; j < V; ++j) out[ov + j] = yr[j];
      }
    }
  }
}

}  // namespace
}  // namespace k3

#pragma GCC diagnostic pop
