// AVX-512 kernel entry points (one per TU of avx512/); semantics in kernel_table.h.
#pragma once
#include <cstdint>

namespace k3::avx512 {
void gemm_bf16(const uint16_t* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t t, float* y, int64_t ldy,
               int64_t r0, int64_t r1);
void gemm_mxfp4_q8(const uint8_t* packed, const uint8_t* scale, int64_t k, const int8_t* q, const float* qs, int64_t t,
                   float* y, int64_t ldy, int64_t r0, int64_t r1);
/// The per-row VNNI kernel (4 tokens per decoded row; FMA per pair of blocks): the previous
/// gemm_mxfp4_q8, kept for k3_bench_gemm_tokens. Not in the KernelTable.
void gemm_mxfp4_q8_rowwise(const uint8_t* packed, const uint8_t* scale, int64_t k, const int8_t* q, const float* qs,
                           int64_t t, float* y, int64_t ldy, int64_t r0, int64_t r1);
/// read_sum.cpp: the streaming-read probe (kernel_table.h read_sum), 8 x 64-byte loads per step.
uint64_t read_sum(const uint64_t* x, int64_t n);
void gemm_mxfp4_f32(const uint8_t* packed, const uint8_t* scale, int64_t k, const float* x, int64_t ldx, int64_t t,
                    float* y, int64_t ldy, int64_t r0, int64_t r1);
/// gemm_dp.cpp: vdpbf16ps on packed panels (kernel_table.h gemm_bf16_dp / gemm_mxfp4_dp).
void gemm_bf16_dp(const uint16_t* w, int64_t ldw, int64_t k, const uint16_t* xb, int64_t ldxb, int64_t t, float* y,
                  int64_t ldy, int64_t r0, int64_t r1);
void gemm_mxfp4_dp(const uint8_t* packed, const uint8_t* scale, int64_t k, const uint16_t* xb, int64_t ldxb, int64_t t,
                   float* y, int64_t ldy, int64_t r0, int64_t r1);
/// vec.h gemm_nn / softmax_online with 16-lane vectors (avx512/attention.cpp).
void gemm_nn(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t n,
             int64_t k, bool accumulate);
float softmax_online(float* x, int64_t n_vis, int64_t n, float* m, float* l);
}  // namespace k3::avx512
