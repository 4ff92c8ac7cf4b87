// k3::vec (vec.h): thin forwarders to the calling thread's kernel table (exec_config.h). The algorithms
// are in vec_impl.h, compiled once per ISA.
#include "kernels/vec.h"

#include "kernels/exec_config.h"

namespace k3::vec {

namespace {
// One thread-local load (the installed context, else the process default) and an indirect call.
inline const KernelTable& tab() { return *exec_context().kt; }
}  // namespace

float dot(const float* a, const float* b, int64_t n) { return tab().dot(a, b, n); }
float sum_sq(const float* x, int64_t n) { return tab().sum_sq(x, n); }
void axpy(float a, const float* x, float* y, int64_t n) { tab().axpy(a, x, y, n); }
void scale(const float* x, float a, float* y, int64_t n) { tab().scale(x, a, y, n); }
void sigmoid(const float* x, float* y, int64_t n) { tab().sigmoid(x, y, n); }
void silu(const float* x, float* y, int64_t n) { tab().silu(x, y, n); }
void mul_sigmoid(const float* g, float* y, int64_t n) { tab().mul_sigmoid(g, y, n); }
void exp(const float* x, float* y, int64_t n) { tab().exp(x, y, n); }
void softmax(float* x, int64_t n) { tab().softmax(x, n); }
float softmax_online(float* x, int64_t n_vis, int64_t n, float* m, float* l) {
  return tab().softmax_online(x, n_vis, n, m, l);
}
void rmsnorm(const float* x, const float* w, float eps, float* y, int64_t n) { tab().rmsnorm(x, w, eps, y, n); }
void l2norm(const float* x, float eps, float s, float* y, int64_t n) { tab().l2norm(x, eps, s, y, n); }
void short_conv_silu(const float* ext, const float* taps, int64_t T, int64_t C, int64_t K, float* out) {
  tab().short_conv_silu(ext, taps, T, C, K, out);
}

void gemm_nn(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t n,
             int64_t k, bool accumulate) {
  tab().gemm_nn(a, lda, b, ldb, c, ldc, m, n, k, accumulate);
}

}  // namespace k3::vec
