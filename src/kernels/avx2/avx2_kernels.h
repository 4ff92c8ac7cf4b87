// AVX2 + FMA kernel entry points (one per TU of avx2/); semantics in kernel_table.h.
#pragma once
#include <cstdint>

namespace k3 {
struct KernelTable;
}

namespace k3::avx2 {
void gemm_bf16(const uint16_t* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t t, float* y, int64_t ldy,
               int64_t r0, int64_t r1);
void quantize_q8(const float* x, int64_t n, int8_t* q, float* s);
/// gemm_bf16.cpp: the pair chain of kernel_table.h gemm_bf16_dp / gemm_mxfp4_dp in fp32 FMA.
void gemm_bf16_dp(const uint16_t* w, int64_t ldw, int64_t k, const uint16_t* xb, int64_t ldxb, int64_t t, float* y,
                  int64_t ldy, int64_t r0, int64_t r1);
void gemm_mxfp4_dp(const uint8_t* packed, const uint8_t* scale, int64_t k, const uint16_t* xb, int64_t ldxb, int64_t t,
                   float* y, int64_t ldy, int64_t r0, int64_t r1);
void gemm_mxfp4_q8(const uint8_t* packed, const uint8_t* scale, int64_t k, const int8_t* q, const float* qs, int64_t t,
                   float* y, int64_t ldy, int64_t r0, int64_t r1);
void gemm_mxfp4_f32(const uint8_t* packed, const uint8_t* scale, int64_t k, const float* x, int64_t ldx, int64_t t,
                    float* y, int64_t ldy, int64_t r0, int64_t r1);
void situ_glu(const float* g, const float* u, float* out, int64_t n, float beta1, float beta2);
uint64_t read_sum(const uint64_t* x, int64_t n);
/// Sets the k3::vec members of t (dot ... short_conv_silu) to this ISA's vec_impl.h build.
void fill_vec_table(KernelTable& t);
}  // namespace k3::avx2
