// The ISA registry: every instruction set k3 compiles kernels for, with its name, its CPU
// detection and its kernel table (kernel_table.h), in one list. Which ISA a forward pass runs is
// part of its execution config (exec_config.h): ExecConfig::isa, unset = the best supported.
// Naming an ISA the CPU lacks, or an unknown name, throws k3::Error.
#pragma once
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/kernel_table.h"

namespace k3 {

enum class Isa { Scalar, Avx2, Avx512 };

/// One registry entry.
struct IsaInfo {
  Isa isa;
  const char* name;               ///< "scalar", "avx2", "avx512"
  bool (*supported)();            ///< true when this CPU (and OS) can run it
  const KernelTable& (*table)();  ///< only call when supported()
};
/// Every compiled ISA, scalar first, then by increasing preference.
std::span<const IsaInfo> isa_registry();

/// "scalar", "avx2", "avx512".
const char* isa_name(Isa isa);
/// Parses an ISA name; throws k3::Error listing the valid names ("unknown ISA 'neon' (K3_ISA
/// must be one of: scalar, avx2, avx512)", `what` naming the flag or variable).
Isa isa_from_name(std::string_view s, std::string_view what = "the ISA");
/// ISAs this CPU can run, scalar first (all are always compiled on x86-64).
std::vector<Isa> supported_isas();
/// True when this CPU can run `isa`.
bool isa_supported(Isa isa);
/// The last (most preferred) supported ISA of the registry.
Isa best_isa();
/// The ISA named by `name` (a flag or K3_ISA value): empty -> best_isa(); otherwise the named
/// ISA, throwing k3::Error when the name is unknown or the CPU lacks it ("K3_ISA=avx512: ISA
/// not supported on this CPU (supported: scalar, avx2)", `what` = "K3_ISA").
Isa select_isa(std::string_view name, std::string_view what = "K3_ISA");
/// The ISA of the calling thread's execution context (exec_config.h).
Isa active_isa();
/// The kernel table of the calling thread's execution context (exec_config.h).
const KernelTable& kernels();
/// The table of a given ISA (tests and benches compare ISAs). Throws k3::Error when the CPU
/// lacks it: "ISA 'avx512' not supported on this CPU (supported: scalar, avx2)".
const KernelTable& kernels_for(Isa isa);

}  // namespace k3
