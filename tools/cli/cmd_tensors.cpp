// `k3 tensors CONFIG [--json]`: the published tensor inventory that the tensor table
// (io/tensor_table.h) gives for a config.json (or a model folder holding one): every stored
// tensor's name, dtype and shape in validation order, with its table row; the text tensors, then
// (when the config declares a vision tower) the vision tower's and projector's (JSON: the
// separate array "vision_tensors"). The Python tools
// (tools/reference tensor_inventory, the trainer, the GGUF exporter) are tested against this
// listing (tests/python/test_tensor_table.py), so the C++ table stays the one list of names.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#include "command.h"
#include "core/error.h"
#include "io/config.h"
#include "io/tensor_table.h"

namespace {

struct TensorsOptions {
  std::string config;
  bool json = false;
};

const char* group_name(k3::TensorGroup g) {
  switch (g) {
    case k3::TensorGroup::Global: return "global";
    case k3::TensorGroup::Common: return "common";
    case k3::TensorGroup::KDA: return "kda";
    case k3::TensorGroup::MLA: return "mla";
    case k3::TensorGroup::DenseMLP: return "dense_mlp";
    case k3::TensorGroup::MoE: return "moe";
    case k3::TensorGroup::Expert: return "expert";
    case k3::TensorGroup::VisionTower: return "vision_tower";
    case k3::TensorGroup::VisionBlock: return "vision_block";
    case k3::TensorGroup::Projector: return "projector";
  }
  return "?";
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

void run_tensors(const TensorsOptions& o) {
  std::filesystem::path p(o.config);
  if (std::filesystem::is_directory(p)) p /= "config.json";
  if (!std::filesystem::is_regular_file(p))
    throw k3::Error("tensors: " + p.string() + ": expected a config.json file or a model folder holding one");
  const k3::ModelConfig c = k3::load_config(p);
  if (!o.json) {
    k3::for_each_tensor_spec(c, [&](const k3::TensorSpec& s) {
      for (const k3::StoredTensor& t : k3::stored_tensors(s))
        std::printf("%s %s %s\n", t.name.c_str(), std::string(k3::dtype_name(t.dtype)).c_str(),
                    shape_text(t.shape).c_str());
    });
    for (const k3::TensorSpec& s : k3::vision_tensors(c))
      std::printf("%s %s %s\n", s.name.c_str(), std::string(k3::dtype_name(s.dtypes.front())).c_str(),
                  shape_text(s.shape).c_str());
    return;
  }
  nlohmann::json kinds = nlohmann::json::array();
  for (const k3::TensorKind& k : k3::tensor_kinds()) {
    nlohmann::json dt = nlohmann::json::array();
    for (k3::DType d : k.dtypes) dt.push_back(std::string(k3::dtype_name(d)));
    kinds.push_back({{"id", k.id},
                     {"group", group_name(k.group)},
                     {"pattern", k.pattern},
                     {"dtypes", dt},
                     {"storage", k.storage == k3::TensorStorage::Mxfp4 ? "mxfp4" : "plain"},
                     {"zero_padded", k.zero_padded},
                     {"when", k.when},
                     {"present", k3::tensor_present(c, k.role)}});
  }
  nlohmann::json tensors = nlohmann::json::array();
  k3::for_each_tensor_spec(c, [&](const k3::TensorSpec& s) {
    const char* id = k3::tensor_kind(s.role).id;
    for (const k3::StoredTensor& t : k3::stored_tensors(s))
      tensors.push_back({{"name", t.name},
                         {"dtype", std::string(k3::dtype_name(t.dtype))},
                         {"shape", t.shape},
                         {"logical_shape", s.shape},
                         {"kind", id},
                         {"layer", s.il},
                         {"expert", s.expert}});
  });
  nlohmann::json vision = nlohmann::json::array();
  for (const k3::TensorSpec& s : k3::vision_tensors(c))
    vision.push_back({{"name", s.name},
                      {"dtype", std::string(k3::dtype_name(s.dtypes.front()))},
                      {"shape", s.shape},
                      {"kind", k3::tensor_kind(s.role).id},
                      {"layer", s.il}});
  const nlohmann::json j = {{"config", p.string()}, {"kinds", kinds}, {"tensors", tensors}, {"vision_tensors", vision}};
  std::printf("%s\n", j.dump(1).c_str());
}

k3cli::Registrar reg("tensors", "List the tensors the tensor table expects for a config.json (text, then vision)",
                     [](CLI::App* sub) {
                       auto opt = std::make_shared<TensorsOptions>();
                       sub->add_option("config", opt->config, "config.json, or a model folder holding one")->required();
                       sub->add_flag("--json", opt->json,
                                     "machine-readable: the table's rows (kinds) and every stored tensor");
                       sub->callback([opt] { run_tensors(*opt); });
                     });

}  // namespace
