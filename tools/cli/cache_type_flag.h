// --cache-type f32|bf16|fp8: how the MLA latent cache stores its rows (core/mla_cache_type.h),
// shared by run, chat, serve, bench, perplexity and info (which counts it).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "core/error.h"
#include "core/mla_cache_type.h"

namespace k3cli {

struct CacheTypeFlag {
  std::string name = "f32";

  void add_to(CLI::App* sub) {
    sub->add_option("--cache-type", name,
                    "MLA latent cache rows: f32 (exact), bf16, or fp8 (E4M3 with an fp32 scale per 128 values, "
                    "rope dims bf16; DeepSeek-V3.2's layout)")
        ->capture_default_str();
  }
  /// The type named by the flag. Errors: k3::Error naming --cache-type and the accepted values.
  k3::MlaCacheType type() const {
    try {
      return k3::parse_mla_cache_type(name);
    } catch (const k3::Error& e) {
      throw k3::Error(std::string("--cache-type: ") + e.what());
    }
  }
  /// Refuses --state-save / --state-load with a non-f32 type before anything is loaded or
  /// computed: state files hold f32 MLA rows (model/sequence_state_file.cpp).
  /// Errors: k3::Error naming both flags.
  void check_state_files(const std::string& state_save, const std::string& state_load) const {
    if ((state_save.empty() && state_load.empty()) || type() == k3::MlaCacheType::F32) return;
    throw k3::Error(std::string(state_save.empty() ? "--state-load" : "--state-save") +
                    ": state files hold f32 MLA cache rows; --cache-type " + name +
                    " cannot be saved or resumed (use --cache-type f32)");
  }
};

}  // namespace k3cli
