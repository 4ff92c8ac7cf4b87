// k3::Sampler — picks the next token id from a row of logits, with llama.cpp's default chain and
// semantics (common/sampling.cpp, src/llama-sampling.cpp):
//
//   0. logit bias      logit += bias[id] (OpenAI's logit_bias; -100 bans the id)
//   1. repeat penalty  over the distinct ids among the last `repeat_last_n` accepted ids: a
//                      positive logit is divided by `repeat_penalty`, a negative one multiplied
//                      then logit -= count·frequency_penalty + presence_penalty (OpenAI's
//                      additive penalties, llama.cpp's penalty_freq / penalty_present)
//   2. top-k           keep the k largest logits (k <= 0: keep all)
//   3. top-p           keep the smallest prefix (by descending probability) whose probability
//                      mass reaches p (p >= 1: keep all); at least one id is kept
//   4. min-p           keep ids whose probability is >= min_p · (largest probability)
//                      (min_p <= 0: keep all)
//   5. temperature     divide the remaining logits by `temp`
//   6. sample          draw from softmax(remaining) with std::mt19937_64 seeded by `seed`
//
// temp <= 0 is greedy: after step 1, the id with the largest logit; ties go to the lowest id.
// Ordering ties anywhere in the chain are broken by the lower id, so a (params, seed, history,
// logits) tuple always gives the same id on every platform (the uniform draw is built from the
// generator's raw 64-bit output, not from std::uniform_real_distribution).
// Probabilities (steps 3, 4, 6) are computed in double from the logits as they stand at that step.
#pragma once
#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace k3 {

/// Sampling knobs. Defaults are llama.cpp's (K3's own generation_config is unverified, spec §5.2).
struct SamplerParams {
  float temp = 0.8f;               ///< temperature; <= 0 means greedy
  int32_t top_k = 40;              ///< <= 0 disables
  float top_p = 0.95f;             ///< in (0, 1]; 1 disables
  float min_p = 0.05f;             ///< in [0, 1]; 0 disables
  float repeat_penalty = 1.0f;     ///< > 0; 1 disables
  float frequency_penalty = 0.0f;  ///< in [-2, 2]: logit -= count in the window × this (OpenAI's)
  float presence_penalty = 0.0f;   ///< in [-2, 2]: logit -= this for ids seen in the window
  int32_t repeat_last_n = 64;      ///< window of accepted ids the penalty looks at; 0 disables, -1 = all
  uint64_t seed = 0;               ///< RNG seed (the CLI draws a random one and prints it)
  /// OpenAI's logit_bias: (id, bias in [-100, 100]) added to the raw logit before the chain
  /// (step 0); a bias of -100 bans the id. Ids outside the row are ignored here (the server
  /// refuses them).
  std::vector<std::pair<int32_t, float>> logit_bias;

  /// Throws k3::Error naming the flag (--temp, --top-k, ...) when a value is out of range or NaN.
  void validate() const;
  /// One line, e.g. "temp 0.80 | top-k 40 | top-p 0.95 | min-p 0.05 | repeat-penalty 1.00 (last 64) | seed 42".
  std::string describe() const;
};

/// Stateful sampler: holds the RNG and the penalty history of one sequence. Not thread-safe.
class Sampler {
 public:
  /// Validates `p` (k3::Error on a bad value) and seeds the RNG with p.seed.
  explicit Sampler(const SamplerParams& p);

  /// Picks an id in [0, logits.size()) from one row of logits (fp32, any finite or -inf values;
  /// at least one must be finite and not NaN). Does not record the id: call accept() for it.
  /// Errors: k3::Error for an empty row or one with no finite logit / a NaN.
  int32_t sample(std::span<const float> logits);

  /// The distribution sample() draws from for this row and history, after the whole chain:
  /// ids[i] with probability w[i] / z (w > 0, double; ids in the chain's order: descending
  /// logit, lower id first). Greedy (temp <= 0): the argmax id alone, w = z = 1. Does not touch
  /// the RNG. Errors: as sample(). Used by speculative sampling (runtime/speculative.h).
  struct Weights {
    std::vector<int32_t> ids;
    std::vector<double> w;
    double z = 0;
  };
  Weights weights(std::span<const float> logits) const;
  /// A uniform draw in [0, 1) (53 random bits) from this sampler's RNG.
  double uniform() { return uniform01(); }

  /// Records an id (prompt or generated) in the repeat-penalty history.
  void accept(int32_t id);
  /// Forgets the history (the RNG keeps its position).
  void reset_history() { history_.clear(); }

  const SamplerParams& params() const { return p_; }

 private:
  struct Cand {
    int32_t id;
    double logit;
  };
  void apply_penalty(std::vector<Cand>& c) const;
  double uniform01();  // [0, 1) with 53 random bits

  SamplerParams p_;
  std::mt19937_64 rng_;
  std::deque<int32_t> history_;
};

/// Index of the largest value; ties go to the lowest index. NaN values are never chosen.
/// Errors: k3::Error for an empty row or one that is all NaN.
int32_t argmax(std::span<const float> logits);

}  // namespace k3
