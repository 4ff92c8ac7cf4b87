// AVX2 + FMA build of the k3::vec primitives (same source as every ISA: kernels/vec_impl.h).
#include "kernels/vec_impl.h"

#include "kernels/avx2/avx2_kernels.h"

namespace k3::avx2 {
void fill_vec_table(KernelTable& t) { vec_fill_table(t); }
}  // namespace k3::avx2
