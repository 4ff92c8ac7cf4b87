// The execution config (kernels/exec_config.h) of a program from its flags and the environment:
// K3_ISA=scalar|avx2|avx512, K3_KERNELS=fast|ref, K3_NUMERICS (when no numerics flag is given),
// K3_MXFP4=int8|exact|mxfp8 (the expert path over the mode's). The programs under tools/ and
// bench/ are the only readers of these variables; the library takes the value.
#pragma once
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.h"
#include "kernels/exec_config.h"

namespace k3tools {

/// A variable's value, or "" when unset.
inline std::string env_value(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

/// True when an MPI launcher started this process (mpirun / mpiexec of Open MPI or MPICH, srun
/// with PMI or PMIx): its rank variables are set. The program then starts MPI; otherwise it
/// runs as one process and never touches MPI (docs/distributed.md).
inline bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK"})
    if (!env_value(v).empty()) return true;
  return false;
}

/// The number of ranks the launcher started, from its variables (Open MPI's
/// OMPI_COMM_WORLD_SIZE, MPICH's PMI_SIZE, Slurm's SLURM_NTASKS under PMI/PMIx); 0 when it does
/// not say (or no launcher started this process).
inline long launched_group_size() {
  auto number = [](const char* name) -> long {
    const std::string v = env_value(name);
    if (v.empty()) return 0;
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    return end != v.c_str() && *end == '\0' && n > 0 ? n : 0;
  };
  if (const long n = number("OMPI_COMM_WORLD_SIZE")) return n;
  if (const long n = number("PMI_SIZE")) return n;
  if (launched_by_mpi()) return number("SLURM_NTASKS");
  return 0;
}

/// The config of `numerics_flag` (empty: K3_NUMERICS, else `fallback`), `threads` (<= 0: the
/// process count) and K3_ISA / K3_KERNELS / K3_MXFP4. A program runs one config, so it also
/// becomes the process default (set_default_exec_config: ModelOptions{} takes it, and kernels run
/// outside a model, e.g. `k3 bench`'s read probe, follow it too). Errors: k3::Error naming the
/// variable or flag, the value found and the valid values (an unknown or unsupported ISA, mode,
/// path or kernel path; K3_BF16_DOT set, naming K3_NUMERICS=bf16 in its place).
inline k3::ExecConfig exec_config(std::string_view numerics_flag, k3::Numerics fallback, int threads) {
  if (const std::string v = env_value("K3_BF16_DOT"); !v.empty())
    throw k3::Error("K3_BF16_DOT=" + v +
                    " is no longer read: use K3_NUMERICS=bf16 (or --numerics bf16) for bf16 trunk "
                    "activations on vdpbf16ps");
  k3::ExecConfig c;
  if (const std::string v = env_value("K3_ISA"); !v.empty()) c.isa = k3::select_isa(v, "K3_ISA");
  if (const std::string v = env_value("K3_KERNELS"); !v.empty()) c.kernels = k3::parse_model_kernels(v, "K3_KERNELS");
  if (!numerics_flag.empty()) {
    c.numerics = k3::parse_numerics(numerics_flag, "--numerics");
  } else if (const std::string v = env_value("K3_NUMERICS"); !v.empty()) {
    c.numerics = k3::parse_numerics(v, "K3_NUMERICS");
  } else {
    c.numerics = fallback;
  }
  if (const std::string v = env_value("K3_MXFP4"); !v.empty()) c.mxfp4 = k3::parse_mxfp4_path(v, "K3_MXFP4");
  c.threads = threads > 0 ? threads : 0;
  k3::set_default_exec_config(c);
  return c;
}

}  // namespace k3tools
