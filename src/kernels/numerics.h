// Numerics modes: what the dense and expert GEMMs multiply. One mode per execution config
// (exec_config.h: ExecConfig::numerics, so per model), chosen by the CLI's `--numerics` (run /
// chat / serve / bench / perplexity / logits) or K3_NUMERICS (read by the CLI only).
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
//          expert path of `int8` (ExecConfig::mxfp4 = Int8), a mode because on K3-mini it is both
//          closer to exact than mxfp8 and faster on VNNI CPUs (docs/performance.md). With a
//          trunk quantized at load to q8 (`--trunk-type q8`) the trunk GEMMs take int8
//          activations too (Q8_0 x Q8_0 integer block dots, kernels/q8q4_trunk.h): llama.cpp's
//          Q8_0 trunk; a bf16 or q4 trunk keeps fp32 activations.
// ExecConfig::mxfp4 (the CLI's K3_MXFP4=int8|exact|mxfp8) overrides any mode's expert path
// (e.g. bf16 trunk + mxfp8 experts).
// Every ISA computes every mode (scalar and AVX2 emulate the bf16 products with fp32 FMA of the
// same values, in the same order: kernel_table.h gemm_bf16_dp), and every mode is batch
// invariant (a row's bits do not depend on the other rows of its GEMM).
// Measured errors and speeds: docs/performance.md, "Prefill and numeric modes at K3 widths".
#pragma once
#include <string>
#include <string_view>

namespace k3 {

enum class Numerics { Exact, Mxfp8, Bf16, Int8 };

/// "exact", "mxfp8", "bf16", "int8".
const char* numerics_name(Numerics n);
/// Parses a mode name; `what` names the flag or variable in the error ("--numerics",
/// "K3_NUMERICS"). Errors: k3::Error listing the valid names.
Numerics parse_numerics(std::string_view s, std::string_view what);

/// The mode of the calling thread's execution context (exec_config.h: exec_context().numerics).
Numerics numerics_mode();
/// The default of `k3 run / chat / serve / bench / perplexity` (docs/performance.md says why).
Numerics default_numerics();

/// The routed experts' MXFP4 GEMM path (ops.h matmul_mxfp4).
enum class Mxfp4Path {
  Int8,      ///< int8 activations x doubled-E2M1 int8 integer dots (VNNI; error bound in ops.h)
  ExactF32,  ///< weights decoded to fp32 in registers, fp32 FMA (reference; ≈1e-6 relative)
  Mxfp8,     ///< MXFP8 activations x MXFP4 weights, exact bf16 products (numerics 'mxfp8')
};
/// "int8", "exact", "mxfp8".
const char* mxfp4_path_name(Mxfp4Path p);
/// Parses "int8" | "exact" | "mxfp8"; `what` names the flag or variable in the error
/// ("K3_MXFP4"). Errors: k3::Error naming `what`, the value and the valid names.
Mxfp4Path parse_mxfp4_path(std::string_view s, std::string_view what);

}  // namespace k3
