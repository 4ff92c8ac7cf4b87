// libFuzzer: config.json -> ModelConfig + layer plan (io/config.h). Any input must parse or throw
// k3::Error; a parsed config must satisfy the invariants the engine relies on.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "io/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const k3::ModelConfig c = k3::parse_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    if (static_cast<int>(c.plan.size()) != c.num_hidden_layers) __builtin_trap();
    if (c.n_kda_layers() + c.n_mla_layers() != c.num_hidden_layers) __builtin_trap();
    if (c.num_experts_per_token > c.num_experts || c.vocab_size <= 0 || c.hidden_size <= 0) __builtin_trap();
    if (c.bos_token_id >= c.vocab_size || c.eos_token_id >= c.vocab_size) __builtin_trap();
  } catch (const k3::Error&) {
  }
  return 0;
}
