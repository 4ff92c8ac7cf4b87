// k3::PrefillGrid — where the model's prefill pieces end and where a sequence resumes
// bit-identically. Every caller that cuts a prompt (the scheduler, the prefix cache, the
// speculative verify) asks this object instead of re-deriving the rules from prefill_chunk.
//
// The facts it encodes (model/k3_model.cpp forward_batch, model/seq_rows.h):
//  - a prefill entry is cut into pieces of prefill_chunk tokens from the entry's start, each run
//    through all layers (chunked KDA, expanded MLA);
//  - KDA splits its recurrence into chunks of 64 tokens, so a state reached at a multiple of 64
//    by pieces that are multiples of 64 equals the state of one longer piece (the GEMMs and the
//    expanded MLA compute each row alone);
//  - an entry of ONE token runs in decode form (KDA decode step, absorbed MLA), which equals the
//    prefill form only when that token starts a piece of the one-pass prefill.
#pragma once
#include <cstdint>

namespace k3 {

class PrefillGrid {
 public:
  /// The KDA chunk length (tokens) of the chunked recurrence (spec §3.3).
  static constexpr int64_t kKdaChunk = 64;

  /// `prefill_chunk` = ModelOptions::prefill_chunk (tokens). Errors: k3::Error when < 1.
  explicit PrefillGrid(int64_t prefill_chunk);

  /// Tokens per prefill piece of a lone forward (ModelOptions::prefill_chunk).
  int64_t chunk() const { return chunk_; }

  /// Where a prefill piece that starts at `start` (tokens already in the sequence) may end when
  /// the prompt ends at `end` and at most `budget` tokens may be fed: `end` when the rest fits,
  /// else the furthest point start + j * chunk() within the budget (`start` itself when no whole
  /// piece fits; a budget < 0 counts as 0). Errors: none (start <= end expected; a piece never
  /// passes `end`).
  int64_t piece_end(int64_t start, int64_t end, int64_t budget) const;

  /// Positions where a state reached by prefill pieces of this grid equals, bit for bit, the
  /// state a one-pass prefill of any longer prompt holds there are multiples of this: 64 (the
  /// KDA chunk) when chunk() is a multiple of 64, else chunk() itself.
  int64_t exact_grain() const { return chunk_ % kKdaChunk == 0 ? kKdaChunk : chunk_; }

  /// True when a sequence of n tokens ends on the exact grain (n >= 1 and n % exact_grain() == 0).
  bool is_exact_resume(int64_t n) const { return n >= 1 && n % exact_grain() == 0; }

  /// The furthest point a prefill of an n-token prompt may resume from and stay bit-identical to
  /// the one-pass prefill (PrefixCache::lookup's bound): at least one token is left to compute,
  /// and a lone last token (decode form) is left only when n - 1 is on the chunk grid; 0 for
  /// n < 2. Formula: n - 1 when (n - 1) % chunk() == 0, else n - 2.
  int64_t max_resume(int64_t n) const { return n < 2 ? 0 : ((n - 1) % chunk_ == 0 ? n - 1 : n - 2); }

  /// Where a kept state of an n-token prompt is cut so that a longer prompt extending it resumes
  /// bit-identically: n itself when it is on the exact grain, else the last multiple of
  /// exact_grain() not above max_resume(n) (0 when none).
  int64_t resume_point(int64_t n) const {
    const int64_t g = exact_grain();
    return n % g == 0 ? n : (max_resume(n) / g) * g;
  }

  /// The most tokens one decode-form entry (BatchEntry::per_token: a speculative verify window)
  /// may hold: chunk().
  int64_t max_decode_window() const { return chunk_; }

 private:
  int64_t chunk_;
};

}  // namespace k3
