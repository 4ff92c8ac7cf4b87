// Opt-in per-operation wall-clock timers for the decode breakdown of `k3 bench --profile`.
// Off by default: a disabled Scope costs one relaxed atomic load. When on, every
// Scope opened outside a parallel region adds its wall time, weight bytes and one call to the
// row of its name (nested Scopes inside parallel regions are not timed, so a row is wall time,
// never a sum over threads). Rows are process-wide; single-sequence use (k3 bench) only.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace k3::prof {

struct OpStat {
  std::string name;    ///< op name, e.g. "self_attn.q_proj" (layer index and ".weight" dropped)
  double seconds = 0;  ///< wall time summed over calls
  double bytes = 0;    ///< weight bytes read, summed over calls
  int64_t calls = 0;
};

/// Turns timing on or off (off: Scopes do nothing). Not for use while a forward pass runs.
void set_enabled(bool on);
bool enabled();
/// Drops every row.
void reset();
/// Every row, largest wall time first.
std::vector<OpStat> snapshot();

/// "language_model.model.layers.3.self_attn.q_proj.weight" -> "self_attn.q_proj": the
/// "language_model." / "model." prefixes, "layers.N." and a trailing ".weight" are dropped.
std::string op_name(std::string_view tensor_name);

/// Times its lifetime under `name` (op_name() is applied) with `bytes` of weights read.
class Scope {
 public:
  Scope(std::string_view name, double bytes);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  std::string_view name_;
  double bytes_ = 0;
  int64_t t0_ns_ = -1;  ///< < 0: not timing
};

}  // namespace k3::prof
