// The AVX2 + FMA kernel table.
#include "kernels/avx2/avx2_kernels.h"
#include "kernels/avx2/kda_avx2.h"
#include "kernels/kernel_table.h"
#include "kernels/q8q4_trunk.h"

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
    k.kda_chunk_heads = avx2::kda_chunk_heads;
    k.kda_decode_heads = avx2::kda_decode_heads;
    k.quant_rows = detail::quant_rows_avx2;
    k.gemm_q8_q8 = detail::gemm_q8_q8_avx2;
    avx2::fill_vec_table(k);
    return k;
  }();
  return t;
}
}  // namespace k3
