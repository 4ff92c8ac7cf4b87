// The AVX-512 kernel table. The element-wise kernels (Q8 quantization, SiTU-GLU) are not on the
// hot path (or are memory-bound), so this table reuses the AVX2 ones (the read probe has its own,
// with 64-byte loads: avx512/read_sum.cpp): every CPU with our AVX-512 level also has AVX2 + FMA
// (cpu_features.cpp requires both). The k3::vec primitives, the KDA kernels and the q8/q4 trunk
// fp32-activation rows are the AVX2 (8-lane) builds too; the q8 trunk's int8 kernel has a VNNI
// build (avx512/q8_trunk_vnni.cpp).
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/kernel_table.h"
#include "kernels/q8q4_trunk.h"

namespace k3 {
const KernelTable& kernel_table_avx512() {
  static const KernelTable t = [] {
    KernelTable k = kernel_table_avx2();  // every entry not overridden below
    k.isa_name = "avx512";
    k.gemm_bf16 = avx512::gemm_bf16;
    k.gemm_mxfp4_q8 = avx512::gemm_mxfp4_q8;
    k.gemm_mxfp4_f32 = avx512::gemm_mxfp4_f32;
    k.read_sum = avx512::read_sum;
    k.gemm_bf16_dp = avx512::gemm_bf16_dp;
    k.gemm_mxfp4_dp = avx512::gemm_mxfp4_dp;
    k.gemm_q8_q8 = detail::gemm_q8_q8_avx512;
    k.gemm_nn = avx512::gemm_nn;
    k.softmax_online = avx512::softmax_online;
    return k;
  }();
  return t;
}
}  // namespace k3
