// What the endpoints share once the model is loaded: tokenizer, scheduler, stop ids, limits,
// request defaults, metrics, and the registry of live sequences (cancelled at shutdown).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "image_parts.h"
#include "metrics.h"
#include "openai_request.h"
#include "request_policy.h"
#include "runtime/grammar_constraint.h"
#include "runtime/scheduler.h"
#include "tokenizer/tokenizer.h"
#include "vision/image_config.h"
#include "vision/vision_tower.h"

namespace k3::server {

/// Live SeqHandles, so that a shutdown past its grace period can cancel them all.
class HandleRegistry {
 public:
  void add(const std::shared_ptr<SeqHandle>& h) {
    std::lock_guard<std::mutex> lk(mu_);
    live_.insert(h);
  }
  void remove(const std::shared_ptr<SeqHandle>& h) {
    std::lock_guard<std::mutex> lk(mu_);
    live_.erase(h);
  }
  /// Ends every live sequence at once with an error event (SeqEvent::unavailable: the HTTP
  /// threads answer 503 with `why`), whatever the engine does: the group of ranks failed.
  void fail_all(const std::string& why) {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& h : live_) {
      SeqEvent e;
      e.done = true;
      e.finish = FinishReason::Error;
      e.error = why;
      e.unavailable = true;
      e.time = std::chrono::steady_clock::now();
      h->cancel();
      h->push(std::move(e));
    }
  }
  /// Live sequences.
  size_t size() {
    std::lock_guard<std::mutex> lk(mu_);
    return live_.size();
  }
  /// Cancels every live sequence (SeqHandle::cancel is idempotent).
  void cancel_all() {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& h : live_) h->cancel();
  }

 private:
  std::mutex mu_;
  std::set<std::shared_ptr<SeqHandle>> live_;
};

/// Tokens of /tokenize work in flight across the server (each request reserves its bound before
/// tokenizing); a request that does not fit is refused instead of waiting with its memory.
class TokenizeBudget {
 public:
  /// Reserves `n` tokens when used + n <= cap; false (nothing reserved) otherwise.
  bool try_take(int64_t n, int64_t cap) {
    std::lock_guard<std::mutex> lk(mu_);
    if (used_ + n > cap) return false;
    used_ += n;
    return true;
  }
  void give(int64_t n) {
    std::lock_guard<std::mutex> lk(mu_);
    used_ -= n;
  }
  int64_t used() {
    std::lock_guard<std::mutex> lk(mu_);
    return used_;
  }

 private:
  std::mutex mu_;
  int64_t used_ = 0;
};

class ResponseStore;  // agent_api.h

struct ServeContext {
  const Tokenizer* tok = nullptr;
  Scheduler* scheduler = nullptr;
  std::vector<int32_t> stop_ids;  ///< LoadedModel::stop_ids()
  int64_t n_ctx = 0;              ///< context per sequence (prompt + generated)
  /// Ranks the model runs on (`mpirun -np N k3 serve`; rank 0 serves HTTP). Requests the
  /// engine cannot run across ranks are refused with 400 naming the limitation while N > 1:
  /// images (an image_url part needs the vision tower, which runs as one process; checked in
  /// render_chat_request_images).
  int n_ranks = 1;
  std::string model_id;           ///< --alias
  RequestDefaults defaults;
  Metrics* metrics = nullptr;
  HandleRegistry* handles = nullptr;
  PrefixCache* cache = nullptr;  ///< the scheduler's prefix cache, or null (off)
  std::string slot_save_path;    ///< --slot-save-path: where /slots/{id}?action=save|restore files live ("" = off)
  std::string fingerprint;       ///< model_fingerprint(), written into saved slot files
  ResponseStore* responses = nullptr;  ///< stored /v1/responses for previous_response_id (null: none)
  const PolicyConfig* policy = nullptr;  ///< keys and --cache-partition (null: no partitions)
  /// --max-tokenize-tokens: ids one /tokenize request may produce (more: 413); the server's
  /// /tokenize requests together reserve at most twice this (more: 429).
  int64_t max_tokenize_tokens = int64_t{1} << 20;
  std::shared_ptr<TokenizeBudget> tokenize_budget = std::make_shared<TokenizeBudget>();
  /// Images of chat requests (image_parts.h; runtime/image_prompt.h runs the tower): the
  /// checkpoint's tower (null: text-only, images refused), its preprocessing, the decoder's
  /// limits (--max-image-pixels), the request limits (--max-image-bytes, --max-images), the text
  /// model's hidden_size.
  const vision::VisionTower* vision = nullptr;
  vision::ImagePreprocessConfig image_config;
  vision::ImageLimits image_limits;
  ImagePartLimits image_parts;
  int64_t hidden_size = 0;
  /// Compiles response_format / grammar constraints (null: such requests get a 400).
  const ConstraintCompiler* constraints = nullptr;
};

/// Token counts of the request being served on this thread, for its log line (httplib runs a
/// request's handler, its content provider and the logger on one worker thread).
struct RequestLog {
  int64_t prompt_tokens = -1;
  int64_t generated_tokens = -1;
};
RequestLog& current_request_log();

}  // namespace k3::server
