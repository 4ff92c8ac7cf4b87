// model_fingerprint: see model_fingerprint.h.
#include "runtime/model_fingerprint.h"

#include <cstdio>
#include <string>

#include "core/read_file.h"
#include "kernels/exec_config.h"

namespace k3 {

uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

std::string model_fingerprint(const Checkpoint& ck, const Model& model) {
  uint64_t h = fnv1a64("k3-model-fingerprint-1", 22);
  auto mix = [&](const std::string& s) { h = fnv1a64(s.data(), s.size() + 1, h); };  // NUL-separated
  mix(read_file_bounded(ck.dir() / "config.json", "model fingerprint: config.json"));
  for (const TensorView& t : ck.tensors()) {
    mix(t.name);
    std::string shape = std::to_string(static_cast<int>(t.dtype));
    for (int64_t d : t.shape) shape += "," + std::to_string(d);
    mix(shape);
    if (t.data != nullptr && t.nbytes > 0) {  // first, middle and last 64 bytes
      const uint64_t n = t.nbytes < 64 ? t.nbytes : 64;
      h = fnv1a64(t.data, n, h);
      h = fnv1a64(t.data + (t.nbytes - n) / 2, n, h);
      h = fnv1a64(t.data + (t.nbytes - n), n, h);
    }
  }
  const ModelOptions& o = model.options();
  const ExecContext x = resolve_exec_config(o.exec);  // resolved by the model: every field is set
  mix(std::string("isa=") + isa_name(x.isa) + " kernels=" + model_kernels_name(x.kernels) +
      " mxfp4=" + mxfp4_path_name(x.mxfp4) + " numerics=" + numerics_name(x.numerics) +
      " prefill_chunk=" + std::to_string(o.prefill_chunk) + " trunk=" +
      (!o.trunk_quant                    ? "bf16"
       : *o.trunk_quant == QuantKind::Q8 ? "q8"
                                         : "q4"));
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace k3
