// What every generating subcommand opens: the checkpoint, the model bound to it and the
// tokenizer next to it, plus the stop ids of spec §5.2.
#pragma once
#include <filesystem>
#include <memory>
#include <vector>

#include "io/checkpoint.h"
#include "io/expert_store.h"
#include "model/k3_model.h"
#include "tokenizer/tokenizer.h"

namespace k3 {

/// Routed experts streamed from the shards (io/expert_store.h) instead of mapped.
struct ExpertStreamOptions {
  bool enabled = false;
  ExpertStoreOptions store;  ///< cache budget, reads in flight, O_DIRECT
};

struct LoadedModel {
  std::unique_ptr<Checkpoint> checkpoint;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<ExpertStore> expert_store;  ///< set when the experts are streamed
  double load_ms = 0;                         ///< wall time of open + bind + tokenizer load

  /// Opens DIR (config.json + safetensors, tiktoken.model [+ tokenizer_config.json]).
  /// Errors: k3::Error naming the flag/file — "-m/--model: DIR is not a directory", the
  /// checkpoint's and tokenizer's own errors, and a tokenizer with more ids than the model's
  /// vocab_size.
  /// `options` are passed to k3::Model (kernels, MXFP4 path; default: the env-driven defaults).
  /// `stream.enabled`: an ExpertStore on the checkpoint feeds the model's routed experts
  /// (options.expert_store is then replaced by it); its errors (io_threads < 1, a shard that
  /// cannot be opened) are k3::Error.
  static LoadedModel open(const std::filesystem::path& dir, const ModelOptions& options = {},
                          const ExpertStreamOptions& stream = {});

  /// Ids that end generation: <|end_of_msg|>, [EOS], and config eos_token_id when it is a
  /// special id of the tokenizer (spec §5.2, §6 item 12).
  std::vector<int32_t> stop_ids() const;
};

}  // namespace k3
