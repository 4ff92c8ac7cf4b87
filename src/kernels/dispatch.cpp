#include "kernels/dispatch.h"

#include <cstdlib>

#include "core/error.h"
#include "kernels/cpu_features.h"

namespace k3 {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

Isa isa_from_name(const std::string& s) {
  if (s == "scalar") return Isa::Scalar;
  if (s == "avx2") return Isa::Avx2;
  if (s == "avx512") return Isa::Avx512;
  throw Error("unknown ISA '" + s + "' (K3_ISA must be one of: scalar, avx2, avx512)");
}

bool isa_supported(Isa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return f.avx2;
    case Isa::Avx512: return f.avx512;
  }
  return false;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> v;
  for (Isa i : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (isa_supported(i)) v.push_back(i);
  return v;
}

namespace {
std::string supported_list() {
  std::string s;
  for (Isa i : supported_isas()) s += (s.empty() ? "" : ", ") + std::string(isa_name(i));
  return s;
}

}  // namespace

Isa isa_from_env(const char* env) {
  if (env != nullptr && *env != '\0') {
    Isa isa = isa_from_name(env);
    if (!isa_supported(isa))
      throw Error("K3_ISA=" + std::string(env) + ": ISA not supported on this CPU (supported: " +
                  supported_list() + ")");
    return isa;
  }
  auto v = supported_isas();
  return v.back();
}

Isa active_isa() {
  // A throw leaves the static unset, so every later call throws the same error again.
  static const Isa isa = isa_from_env(std::getenv("K3_ISA"));
  return isa;
}

const KernelTable& kernels_for(Isa isa) {
  if (!isa_supported(isa))
    throw Error("ISA '" + std::string(isa_name(isa)) + "' not supported on this CPU (supported: " +
                supported_list() + ")");
  switch (isa) {
    case Isa::Scalar: return kernel_table_scalar();
    case Isa::Avx2: return kernel_table_avx2();
    case Isa::Avx512: return kernel_table_avx512();
  }
  return kernel_table_scalar();
}

const KernelTable& kernels() {
  static const KernelTable& t = kernels_for(active_isa());
  return t;
}

}  // namespace k3
