// The AVX2 + FMA kernel table.
#include "kernels/avx2/avx2_kernels.h"
#include "kernels/kernel_table.h"

namespace k3 {
const KernelTable& kernel_table_avx2() {
  static const KernelTable t{"avx2",           avx2::gemm_bf16,   avx2::quantize_q8,
                             avx2::gemm_mxfp4_q8, avx2::gemm_mxfp4_f32, avx2::situ_glu,
                             avx2::read_sum};
  return t;
}
}  // namespace k3
