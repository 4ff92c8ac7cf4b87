// AVX-512 build of the k3::vec primitives (same source as every ISA: kernels/vec_impl.h), with
// 16-lane vectors.
#include "kernels/vec_impl.h"

#include "kernels/avx512/avx512_kernels.h"

namespace k3::avx512 {
void fill_vec_table(KernelTable& t) { vec_fill_table(t); }
}  // namespace k3::avx512
