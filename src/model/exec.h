// How a forward pass executes its sublayers: the readable scalar oracle (k3::ref, fp64
// accumulation — the path every fast path is tested against) or the dispatched multi-threaded
// kernels of kernels/ops.h, kda_chunk.h and kda_decode.h (fp32 accumulation; the model's
// execution config, kernels/exec_config.h, installed by k3::Model for every call, picks their
// kernel table, numerics mode and threads).
// Spec: k3-architecture.md §3 (same math on both paths); algorithms.md §1.3–§1.5 (chunked KDA),
// §5.3 (MXFP4 dot).
#pragma once

#include "kernels/mla_attend.h"
#include "kernels/ops.h"

namespace k3 {

/// Per-sublayer execution choice, from k3::Model's resolved ExecConfig (ModelOptions::exec).
struct ExecOptions {
  bool fast = false;                      ///< false: k3::ref oracle code, unchanged
  Mxfp4Path mxfp4 = Mxfp4Path::ExactF32;  ///< MXFP4 expert path on the fast path
  /// How MLA caches store the rows this forward appends (ModelOptions::mla_cache, `--cache-type`;
  /// kernels/mla_attend.h). Both paths read every type (the oracle decodes the rows first).
  MlaCacheType mla_cache = MlaCacheType::F32;
};

}  // namespace k3
