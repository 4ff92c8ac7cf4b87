// Run statistics for the CLI: a wall-clock timer, peak resident memory, and the one-line
// end-of-run summary that `k3 run` / `k3 chat` print on stderr.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace k3 {

/// Wall-clock stopwatch (std::chrono::steady_clock), started at construction.
class Timer {
 public:
  Timer() : t0_(std::chrono::steady_clock::now()) {}
  void restart() { t0_ = std::chrono::steady_clock::now(); }
  /// Milliseconds since construction / the last restart().
  double ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::chrono::steady_clock::time_point t0_;
};

/// Peak resident set size of this process in bytes (VmHWM of /proc/self/status), or 0 when it
/// cannot be read (non-Linux). Never throws.
uint64_t peak_rss_bytes();

/// What one generation run measured. Times in milliseconds.
struct RunStats {
  double load_ms = 0;        ///< checkpoint open + model bind + tokenizer load
  int64_t n_prompt = 0;      ///< tokens prefilled
  double prompt_ms = 0;      ///< prefill time (the forward passes over the prompt)
  int64_t n_gen = 0;         ///< tokens sampled
  double gen_ms = 0;         ///< decode time (sampling + forward of each sampled token)
  uint64_t state_bytes = 0;  ///< SequenceState::bytes() at the end
  uint64_t seed = 0;
  bool show_seed = false;
  std::string threads;  ///< worker count and wait policy as the caller words it, e.g. "2 (passive wait)"

  /// "load: X ms | prompt: N tok, X tok/s | gen: N tok, X tok/s | peak RSS: X MiB | state: X MiB"
  /// (+ " | threads: T" when `threads` is set, + " | seed: S" when show_seed). Rates are "-" when
  /// the count or time is zero.
  std::string line() const;
};

}  // namespace k3
