// `--numerics exact|mxfp8|bf16` of run / chat / serve / bench / perplexity / logits (issue 14).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "kernels/numerics.h"

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
  /// Fixes the process's mode (before the model loads). Errors: k3::Error (bad K3_NUMERICS, K3_BF16_DOT).
  k3::Numerics apply(k3::Numerics fallback) const { return k3::select_numerics(value, fallback); }
};

}  // namespace k3cli
