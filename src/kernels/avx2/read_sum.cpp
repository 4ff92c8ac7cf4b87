// AVX2 streaming-read probe: Σ x mod 2^64 over 64-bit words, 8 independent 32-byte loads per
// step (256 bytes: four cache lines in flight per iteration, more than the add latency needs).
#include "kernels/avx2/avx2_kernels.h"
#include "kernels/avx2/avx2_util.h"

namespace k3::avx2 {

uint64_t read_sum(const uint64_t* x, int64_t n) {
  __m256i a[8];
  for (auto& v : a) v = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int j = 0; j < 8; ++j)
      a[j] = _mm256_add_epi64(a[j], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 4 * j)));
  for (int j = 1; j < 8; ++j) a[0] = _mm256_add_epi64(a[0], a[j]);
  alignas(32) uint64_t l[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(l), a[0]);
  uint64_t s = l[0] + l[1] + l[2] + l[3];
  for (; i < n; ++i) s += x[i];
  return s;
}

}  // namespace k3::avx2
