// The execution config of a command (kernels/exec_config.h) from its flags and the environment:
// `--numerics exact|mxfp8|bf16|int8` (run / chat / serve / bench / perplexity / logits), -t, and
// K3_ISA / K3_KERNELS / K3_NUMERICS / K3_MXFP4 (tools/exec_env.h).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "tools/exec_env.h"

namespace k3cli {

/// --numerics exact|mxfp8|bf16|int8 (kernels/numerics.h; default K3_NUMERICS, else the command's).
struct NumericsFlag {
  std::string value;
  void add_to(CLI::App* sub) {
    sub->add_option("--numerics", value,
                    "numerics mode: exact (fp32 activations), mxfp8 (MXFP8 x MXFP4 experts, exact "
                    "trunk), bf16 (bf16 trunk activations + int8 experts) or int8 (int8 x MXFP4 "
                    "experts, exact trunk); default K3_NUMERICS, else this command's (logits: "
                    "exact; the others: int8, docs/performance.md)")
        ->check(CLI::IsMember({"exact", "mxfp8", "bf16", "int8"}));
  }
  /// The command's execution config (k3tools::exec_config) with this flag. Errors: as exec_config.
  k3::ExecConfig exec(k3::Numerics fallback, int threads = 0) const {
    return k3tools::exec_config(value, fallback, threads);
  }
};

}  // namespace k3cli
