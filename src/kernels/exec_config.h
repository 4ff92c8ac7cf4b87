// The execution config: which code computes a forward pass, as one value. A model carries its
// own (ModelOptions::exec), so two models in one process (a target and a draft) may differ in
// ISA, kernel path, numerics, MXFP4 expert path and thread count. The library reads no
// environment variable: the CLI builds the value from its flags and K3_* (tools/cli/exec_flags.h).
//
// How the kernels see it: a resolved ExecContext is installed for the calling thread by an
// ExecScope (k3::Model installs its own around every forward call and its load-time work), and
// parallel_for (threads.h) installs the caller's context in every worker it runs. The ops
// (ops.h, vec.h, kda_chunk.h, kda_decode.h, q8q4_trunk.h) read exec_context(): its kernel table,
// numerics mode and thread count. A thread without a scope uses the process default
// (set_default_exec_config; initially the built-in defaults: the best ISA, fast kernels, exact
// numerics).
#pragma once
#include <optional>
#include <string_view>

#include "kernels/dispatch.h"
#include "kernels/numerics.h"

namespace k3 {

/// Which code computes the sublayers (both compute spec §3; Reference is the test oracle).
enum class ModelKernels {
  Fast,       ///< dispatched kernels (kernels/ops.h, kda_chunk.h, kda_decode.h), fp32, threads
  Reference,  ///< the readable scalar k3::ref code with fp64 accumulation (slow; the oracle)
};
/// "fast", "ref".
const char* model_kernels_name(ModelKernels k);
/// Parses "fast" | "ref"; `what` names the flag or variable in the error (e.g. "K3_KERNELS").
/// Errors: k3::Error naming `what`, the value found and the valid names.
ModelKernels parse_model_kernels(std::string_view s, std::string_view what);

/// One execution config. An unset field takes the process default's (set_default_exec_config)
/// when resolved, else the built-in default named below.
struct ExecConfig {
  std::optional<Isa> isa;               ///< kernel table; built-in: the best this CPU supports
  std::optional<ModelKernels> kernels;  ///< built-in: Fast
  std::optional<Numerics> numerics;     ///< what the GEMMs multiply (numerics.h); built-in: Exact
  std::optional<Mxfp4Path> mxfp4;       ///< expert path; built-in: numerics_mxfp4_path(numerics)
  std::optional<int> threads;           ///< kernel workers; built-in and <= 0: the process count
};

/// A resolved ExecConfig: every choice made, the ISA checked against this CPU.
struct ExecContext {
  Isa isa = Isa::Scalar;
  const KernelTable* kt = nullptr;  ///< kernels_for(isa)
  ModelKernels kernels = ModelKernels::Fast;
  Numerics numerics = Numerics::Exact;
  Mxfp4Path mxfp4 = Mxfp4Path::ExactF32;
  int threads = 0;  ///< > 0: worker count; 0: the process count
  /// The resolved values as a config (every field set; resolving it again gives the same).
  ExecConfig config() const;
};

/// Resolves `c` (unset fields: the process default's, else built-in; an unset mxfp4 follows the
/// resolved numerics unless the process default sets one). Errors: k3::Error when the CPU lacks
/// the ISA ("ISA 'avx512' not supported on this CPU (supported: scalar, avx2)").
ExecContext resolve_exec_config(const ExecConfig& c);

/// The MXFP4 expert path of a numerics mode: exact -> ExactF32, mxfp8 -> Mxfp8, int8 and bf16
/// -> Int8 (numerics.h describes the modes).
Mxfp4Path numerics_mxfp4_path(Numerics n);

namespace detail {
/// The calling thread's installed context or null (ExecScope sets it; parallel_for carries it
/// into its workers). Constant-initialized, so reading it is one thread-local load.
extern constinit thread_local const ExecContext* tl_exec_context;
}  // namespace detail

/// The process default context (default_exec_config() resolved).
const ExecContext& default_exec_context();

/// The calling thread's context: the innermost ExecScope's, else the process default. Inline:
/// k3::vec calls it once per primitive.
inline const ExecContext& exec_context() {
  const ExecContext* c = detail::tl_exec_context;
  return c != nullptr ? *c : default_exec_context();
}

/// Replaces the process default: what unset fields of a config resolve to (a model's
/// ModelOptions::exec), and the context of threads without a scope (kernel-level callers: tests,
/// benches). Set it before building models or calling kernels from other threads; contexts
/// already installed by scopes and models already built are unaffected. Errors: as
/// resolve_exec_config of `c` alone (then nothing changes).
void set_default_exec_config(const ExecConfig& c);
/// The process default config as given (initially ExecConfig{}: every field unset).
ExecConfig default_exec_config();

/// Installs `ctx` as the calling thread's context until destruction (then the previous one is
/// back). `ctx` must outlive the scope. Not copyable or movable.
class ExecScope {
 public:
  explicit ExecScope(const ExecContext& ctx);
  ~ExecScope();
  ExecScope(const ExecScope&) = delete;
  ExecScope& operator=(const ExecScope&) = delete;

 private:
  const ExecContext* prev_;
};

}  // namespace k3
