// The AVX2 + FMA kernel table.
#include "kernels/avx2/avx2_kernels.h"
#include "kernels/kernel_table.h"

namespace k3 {
const KernelTable& kernel_table_avx2() {
  static const KernelTable t = [] {
    KernelTable k{};
    k.isa_name = "avx2";
    k.gemm_bf16 = avx2::gemm_bf16;
    k.quantize_q8 = avx2::quantize_q8;
    k.gemm_mxfp4_q8 = avx2::gemm_mxfp4_q8;
    k.gemm_mxfp4_f32 = avx2::gemm_mxfp4_f32;
    k.gemm_bf16_dp = avx2::gemm_bf16_dp;
    k.gemm_mxfp4_dp = avx2::gemm_mxfp4_dp;
    k.situ_glu = avx2::situ_glu;
    k.read_sum = avx2::read_sum;
    avx2::fill_vec_table(k);
    return k;
  }();
  return t;
}
}  // namespace k3
