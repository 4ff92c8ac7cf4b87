// Progress display on stderr for the library's ProgressFn reports (core/progress.h): loading a
// checkpoint (shard headers, trunk quantization), the page-in of --warm and long prefills.
// Nothing is shown for a step that completes within its first second. After that: on a
// terminal a bar redrawn in place ("prefill [=====     ] 2048/4096 (50%)"), otherwise a plain
// line ("prefill: 2048/4096 (50%)") at most every 5 seconds and one when the step completes.
// The page-in counts bytes: shown in GiB with the rate ("page-in [==   ] 1.2/8.0 GiB (15%)
// 1450 MiB/s").
#pragma once
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "core/page_in.h"
#include "core/progress.h"

namespace k3cli {

class ProgressBar {
 public:
  explicit ProgressBar(bool tty = isatty(2) != 0) : tty_(tty) {}
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  ~ProgressBar() { finish(); }

  /// The ProgressFn that drives this display (it must outlive the calls).
  k3::ProgressFn fn() {
    return [this](std::string_view what, int64_t done, int64_t total) { update(what, done, total); };
  }

  void update(std::string_view what, int64_t done, int64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (what != what_ || done == 0) {  // a new step
      finish();
      what_ = std::string(what);
      t0_ = now;
      last_ = now;
      shown_ = false;
    }
    const double since_start = std::chrono::duration<double>(now - t0_).count();
    const bool complete = total > 0 && done >= total;
    if (!shown_ && since_start < 1.0) return;  // quick steps show nothing
    const double since_last = std::chrono::duration<double>(now - last_).count();
    const int pct = total > 0 ? static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(total)) : 0;
    if (tty_) {
      if (shown_ && pct == pct_ && !complete && since_last < 0.2) return;
      const std::string amount = amount_text(done, total, since_start);
      const int width = 30, fill = total > 0 ? static_cast<int>(static_cast<double>(width) * done / total + 0.5) : 0;
      std::string bar(static_cast<std::size_t>(fill < 0 ? 0 : fill > width ? width : fill), '=');
      bar.resize(width, ' ');
      std::fprintf(stderr, "\r%s [%s] %s %.0f s\x1b[K", what_.c_str(), bar.c_str(), amount.c_str(), since_start);
      open_line_ = true;
    } else {
      if (shown_ && !complete && since_last < 5.0) return;
      const std::string amount = amount_text(done, total, since_start);
      std::fprintf(stderr, "%s: %s %.0f s\n", what_.c_str(), amount.c_str(), since_start);
    }
    std::fflush(stderr);
    shown_ = true;
    pct_ = pct;
    last_ = now;
    if (complete) finish();
  }

  /// Ends the current line (on a terminal) so the next output starts on a fresh one.
  void finish() {
    if (open_line_) {
      std::fputc('\n', stderr);
      std::fflush(stderr);
    }
    open_line_ = false;
    what_.clear();
  }

 private:
  /// "2048/4096 (50%)"; for the page-in (bytes) "1.2/8.0 GiB (15%) 1450 MiB/s".
  std::string amount_text(int64_t done, int64_t total, double seconds) const {
    const int pct = total > 0 ? static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(total)) : 0;
    char b[160];
    if (what_ == k3::kPageInStep) {
      const double gib = 1024.0 * 1024.0 * 1024.0;
      std::snprintf(b, sizeof b, "%.1f/%.1f GiB (%d%%) %.0f MiB/s", static_cast<double>(done) / gib,
                    static_cast<double>(total) / gib, pct,
                    seconds > 0 ? static_cast<double>(done) / 1048576.0 / seconds : 0.0);
    } else {
      std::snprintf(b, sizeof b, "%lld/%lld (%d%%)", static_cast<long long>(done), static_cast<long long>(total), pct);
    }
    return b;
  }

  bool tty_;
  std::string what_;
  std::chrono::steady_clock::time_point t0_{}, last_{};
  bool shown_ = false, open_line_ = false;
  int pct_ = -1;
};

}  // namespace k3cli
