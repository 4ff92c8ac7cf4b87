// Numerics modes (issue 14): what the dense and expert GEMMs multiply. One mode per process,
// chosen by `--numerics` (run / chat / serve / bench / perplexity / logits) or K3_NUMERICS.
//
//   exact  fp32 activations everywhere (bf16 trunk weights widened exactly, MXFP4 experts
//          decoded exactly, fp32 FMA): the 1e-5 contract with the fp64 reference.
//   mxfp8  K3's deployment recipe for the routed experts: activations quantized to MXFP8 (E4M3
//          elements, one E8M0 scale per 32, algorithms.md §5.2 floor rule with saturation, as in
//          K3's quantization-aware training) times the MXFP4 weights, both exact in bf16, so
//          vdpbf16ps multiplies them exactly (fp32 accumulation). The trunk stays exact.
//   bf16   bf16-rounded (RNE) activations for every bf16 trunk GEMM (what GPU engines compute),
//          on vdpbf16ps, with int8's experts (on K3-mini closer to exact than mxfp8's, and 3-7x
//          faster on VNNI: docs/performance.md).
//   int8   exact trunk; routed experts with int8 activations (Q8_0: per 32-block scale amax/127)
//          times the doubled-E2M1 weights in exact integer dots (VNNI vpdpbusd): the previous
//          default expert path (K3_MXFP4=int8), kept as a mode because on K3-mini it is both
//          closer to exact than mxfp8 and faster on VNNI CPUs (docs/performance.md).
// K3_MXFP4=int8|exact|mxfp8 overrides any mode's expert path (e.g. bf16 trunk + mxfp8 experts).
// Every ISA computes every mode (scalar and AVX2 emulate the bf16 products with fp32 FMA of the
// same values, in the same order: kernel_table.h gemm_bf16_dp), and every mode is batch
// invariant (a row's bits do not depend on the other rows of its GEMM).
// Measured errors and speeds: docs/performance.md, "Prefill and numeric modes at K3 widths".
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace k3 {

enum class Numerics { Exact, Mxfp8, Bf16, Int8 };

/// "exact", "mxfp8", "bf16", "int8".
const char* numerics_name(Numerics n);
/// Parses a mode name; `what` names the flag or variable in the error ("--numerics",
/// "K3_NUMERICS"). Errors: k3::Error listing the valid names.
Numerics parse_numerics(std::string_view s, std::string_view what);

/// Sets the process-wide mode before the first GEMM (the CLI's --numerics). Later calls with
/// another mode after numerics_mode() was read throw k3::Error (a model cannot switch halfway).
void set_numerics_mode(Numerics n);
/// The process-wide mode: set_numerics_mode(), else K3_NUMERICS, else `fallback` (each
/// command's default: exact for `k3 logits`, the measured choice for the others; see
/// default_numerics()). Read once; the first caller's fallback fixes it.
Numerics numerics_mode(Numerics fallback);
/// The mode in force; library default (nothing set, no K3_NUMERICS): exact.
Numerics numerics_mode();
/// Benchmarks and tests only: replaces the process's mode between forward passes (no GEMM may
/// be running; a Model picks its expert path when constructed, so build a new one after this).
void force_numerics_mode(Numerics n);
/// The CLI's choice: `--numerics VALUE` when non-empty, else K3_NUMERICS, else `fallback`;
/// fixes and returns the process mode. Errors: as parse_numerics / set_numerics_mode.
Numerics select_numerics(std::string_view flag, Numerics fallback);
/// The default of `k3 run / chat / serve / bench / perplexity` (docs/performance.md says why).
Numerics default_numerics();

/// K3_BF16_DOT was folded into the modes: when it is set, throws k3::Error naming
/// K3_NUMERICS=bf16 / --numerics bf16. (K3_MXFP4=int8|exact still overrides the expert path:
/// ops.h default_mxfp4_path.) Called by numerics_mode().
void check_legacy_numerics_env();

}  // namespace k3
