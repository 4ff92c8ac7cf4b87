// AVX-512 streaming-read probe: Σ x mod 2^64 over 64-bit words, 8 independent 64-byte loads per
// step (512 bytes: eight cache lines in flight per iteration) and a software prefetch of the
// step kPrefetch bytes ahead (docs/performance.md "What the read probe measures": it reads
// faster than the hardware prefetcher alone, as the T = 1 GEMV's prefetch does).
#include "kernels/avx512/avx512_kernels.h"

#include <immintrin.h>

namespace k3::avx512 {

namespace {
constexpr int64_t kPrefetch = 1024 / 8;  // words ahead (1 KiB); a prefetch past the end is harmless
}

uint64_t read_sum(const uint64_t* x, int64_t n) {
  __m512i a[8];
  for (auto& v : a) v = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    // one line per 8-line step: it starts the stream ahead; the L2 streamer fetches its neighbours
    _mm_prefetch(reinterpret_cast<const char*>(x + i + kPrefetch), _MM_HINT_T0);
    for (int j = 0; j < 8; ++j) a[j] = _mm512_add_epi64(a[j], _mm512_loadu_si512(x + i + 8 * j));
  }
  for (int j = 1; j < 8; ++j) a[0] = _mm512_add_epi64(a[0], a[j]);
  // Lanes summed as unsigned (wrapping): _mm512_reduce_add_epi64 adds in signed long long, whose
  // overflow is UB (UBSan flags it).
  alignas(64) uint64_t l[8];
  _mm512_store_si512(l, a[0]);
  uint64_t s = 0;
  for (uint64_t v : l) s += v;
  for (; i < n; ++i) s += x[i];
  return s;
}

}  // namespace k3::avx512
