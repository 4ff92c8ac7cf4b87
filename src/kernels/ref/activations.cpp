#include "kernels/ref/activations.h"

namespace k3::ref {

void sigmoid_inplace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = sigmoid(x[i]);
}

}  // namespace k3::ref
