#include "kernels/dispatch.h"

#include "core/error.h"
#include "kernels/cpu_features.h"
#include "kernels/exec_config.h"

namespace k3 {

namespace {
bool always() { return true; }
bool has_avx2() { return cpu_features().avx2; }
bool has_avx512() { return cpu_features().avx512; }

constexpr IsaInfo kRegistry[] = {
    {Isa::Scalar, "scalar", always, kernel_table_scalar},
    {Isa::Avx2, "avx2", has_avx2, kernel_table_avx2},
    {Isa::Avx512, "avx512", has_avx512, kernel_table_avx512},
};

const IsaInfo* find(Isa isa) {
  for (const IsaInfo& i : kRegistry)
    if (i.isa == isa) return &i;
  return nullptr;
}

std::string supported_list() {
  std::string s;
  for (Isa i : supported_isas()) s += (s.empty() ? "" : ", ") + std::string(isa_name(i));
  return s;
}

std::string all_names() {
  std::string s;
  for (const IsaInfo& i : kRegistry) s += (s.empty() ? "" : ", ") + std::string(i.name);
  return s;
}
}  // namespace

std::span<const IsaInfo> isa_registry() { return kRegistry; }

const char* isa_name(Isa isa) {
  const IsaInfo* i = find(isa);
  return i != nullptr ? i->name : "?";
}

Isa isa_from_name(std::string_view s, std::string_view what) {
  for (const IsaInfo& i : kRegistry)
    if (s == i.name) return i.isa;
  throw Error("unknown ISA '" + std::string(s) + "' (" + std::string(what) + " must be one of: " + all_names() + ")");
}

bool isa_supported(Isa isa) {
  const IsaInfo* i = find(isa);
  return i != nullptr && i->supported();
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> v;
  for (const IsaInfo& i : kRegistry)
    if (i.supported()) v.push_back(i.isa);
  return v;
}

Isa best_isa() { return supported_isas().back(); }

Isa select_isa(std::string_view name, std::string_view what) {
  if (name.empty()) return best_isa();
  const Isa isa = isa_from_name(name, what);
  if (!isa_supported(isa))
    throw Error(std::string(what) + "=" + std::string(name) +
                ": ISA not supported on this CPU (supported: " + supported_list() + ")");
  return isa;
}

Isa active_isa() { return exec_context().isa; }

const KernelTable& kernels() { return *exec_context().kt; }

const KernelTable& kernels_for(Isa isa) {
  const IsaInfo* i = find(isa);
  if (i == nullptr || !i->supported())
    throw Error("ISA '" + std::string(isa_name(isa)) + "' not supported on this CPU (supported: " + supported_list() +
                ")");
  return i->table();
}

}  // namespace k3
