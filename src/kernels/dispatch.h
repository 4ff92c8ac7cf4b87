// Runtime ISA dispatch: the kernel table is chosen once per process from cpuid, or forced with
// the environment variable K3_ISA=scalar|avx2|avx512 (tests, bug reports). Forcing an ISA the
// CPU lacks, or an unknown name, throws k3::Error on first use.
#pragma once
#include <string>
#include <vector>

#include "kernels/kernel_table.h"

namespace k3 {

enum class Isa { Scalar, Avx2, Avx512 };

/// "scalar", "avx2", "avx512".
const char* isa_name(Isa isa);
/// Parses an ISA name; throws k3::Error listing the valid names.
Isa isa_from_name(const std::string& s);
/// ISAs this CPU can run, scalar first (all are always compiled on x86-64).
std::vector<Isa> supported_isas();
/// True when this CPU can run `isa`.
bool isa_supported(Isa isa);
/// The ISA selected by a K3_ISA value: null/empty -> best supported; otherwise the named ISA,
/// throwing k3::Error when the name is unknown or the CPU lacks it ("... not supported on this
/// CPU (supported: scalar, avx2)"). active_isa() calls it once with getenv("K3_ISA").
Isa isa_from_env(const char* value);
/// The process-wide ISA: K3_ISA if set (validated), else the best supported. Chosen once.
Isa active_isa();
/// The process-wide table (of active_isa()).
const KernelTable& kernels();
/// The table of a given ISA (tests and benches compare ISAs). Throws k3::Error when the CPU
/// lacks it: "ISA 'avx512' not supported on this CPU (supported: scalar, avx2)".
const KernelTable& kernels_for(Isa isa);

}  // namespace k3
