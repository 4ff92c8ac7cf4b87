// LoadedModel::open and the stop ids.
#include "runtime/loaded_model.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/stats.h"

namespace k3 {

LoadedModel LoadedModel::open(const std::filesystem::path& dir, const ModelOptions& options,
                              const ExpertStreamOptions& stream) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw Error("-m/--model: '" + dir.string() + "' is not a directory (expected a K3 checkpoint directory)");
  Timer t;
  LoadedModel m;
  CheckpointOptions co;
  co.progress = options.progress;
  m.checkpoint = Checkpoint::open(dir, co);
  m.tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(dir));
  const int vocab = m.checkpoint->config().vocab_size;
  if (m.tokenizer->vocab_size() > vocab)
    throw Error("tokenizer of '" + dir.string() + "' has " + std::to_string(m.tokenizer->vocab_size()) +
                " ids but config.json vocab_size is " + std::to_string(vocab));
  check_config_token_ids(m.checkpoint->config(), m.tokenizer->vocab_size(), (dir / "config.json").string());
  ModelOptions mo = options;
  if (stream.enabled) {
    m.expert_store = std::make_shared<ExpertStore>(*m.checkpoint, stream.store);
    mo.expert_store = m.expert_store;
  }
  m.model = std::make_unique<Model>(*m.checkpoint, mo);
  m.load_ms = t.ms();
  return m;
}

std::vector<int32_t> LoadedModel::stop_ids() const {
  std::vector<int32_t> ids{tokenizer->end_of_msg_id(), tokenizer->eos_id()};
  const int32_t cfg_eos = checkpoint->config().eos_token_id;
  if (tokenizer->is_special(cfg_eos) && std::find(ids.begin(), ids.end(), cfg_eos) == ids.end()) ids.push_back(cfg_eos);
  return ids;
}

}  // namespace k3
