// SequenceState::save / load: a state file (see model/sequence_state.h).
#include "model/sequence_state_impl.h"

#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/mapped_file.h"
#include "model/state_file.h"
#include "model/state_header.h"

namespace k3 {

namespace {

constexpr int kVersion = kSequenceStateVersion;

using Shape = std::vector<int64_t>;

Shape kda_s_shape(const KdaDims& d) { return {d.H, d.d, d.d}; }
Shape kda_conv_shape(const KdaDims& d) { return {3, d.K - 1, d.C()}; }

}  // namespace

// File: the container of model/state_file.h, magic "K3SEQST1", JSON header
// {"format","version","n_past","model_fingerprint","ids","extra","layers":[{il, kind, dims...,
// "floats": n}]}, payload: the fp32 arrays of each layer in order (KDA: S then conv; MLA: cache
// rows).
void SequenceState::save(const std::filesystem::path& file, const SequenceFileMeta& meta) const {
  if (!impl_) throw Error("sequence state: save of a moved-from state");
  if (impl_->failed) throw Error("sequence state: save of a state left inconsistent by a failed forward pass");
  if (mla_cache_type() != MlaCacheType::F32)
    throw Error("sequence state '" + file.string() + "': its MLA cache holds " +
                mla_cache_type_name(mla_cache_type()) +
                " rows; state files hold f32 rows (save with --cache-type f32)");
  if (!meta.ids.empty() && static_cast<int64_t>(meta.ids.size()) != impl_->n_past)
    throw Error("sequence state '" + file.string() + "': " + std::to_string(meta.ids.size()) +
                " ids recorded for a state of " + std::to_string(impl_->n_past) + " tokens");
  nlohmann::ordered_json h;
  h["format"] = "k3-sequence-state";
  h["version"] = kVersion;
  h["n_past"] = impl_->n_past;
  h["model_fingerprint"] = meta.fingerprint;
  h["ids"] = meta.ids;
  if (impl_->ranks > 1) {  // a rank's piece under the head split (model/k3_model.h)
    h["rank"] = impl_->rank;
    h["ranks"] = impl_->ranks;
  }
  if (!meta.extra_json.empty()) {
    // One level below the header's bound: the header holds it under "extra".
    check_json_depth(meta.extra_json, "sequence state '" + file.string() + "': extra metadata", kMaxJsonDepth - 1);
    try {
      h["extra"] = nlohmann::ordered_json::parse(meta.extra_json);
    } catch (const nlohmann::json::exception& e) {
      throw Error("sequence state: extra metadata is not JSON: " + std::string(e.what()));
    }
  }
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (size_t il = 0; il < impl_->layers.size(); ++il) {
    const LayerState& L = impl_->layers[il];
    if (L.kind == AttnKind::KDA)
      layers.push_back({{"il", il},
                        {"kind", "kda"},
                        {"S_shape", kda_s_shape(L.kda_dims)},
                        {"S_layout", "[H, d_k, d_v] fp32 key-major"},
                        {"conv_shape", kda_conv_shape(L.kda_dims)},
                        {"conv_layout", "[q|k|v, K-1 (oldest first), C] fp32 raw projections"},
                        {"S_floats", L.kda.S.size()},
                        {"conv_floats", L.kda.conv.size()}});
    else
      layers.push_back({{"il", il},
                        {"kind", "mla"},
                        {"cache_shape", Shape{impl_->n_past, L.mla_dims.row()}},
                        {"cache_layout", "[n_tokens, kv_lora_rank (normalized latent) + rope_dim (raw k_r)] fp32"},
                        {"cache_floats", L.mla.rows.size()}});
  }
  h["layers"] = layers;
  const std::string hs = h.dump();
  std::vector<std::span<const std::byte>> payload;
  for (const LayerState& L : impl_->layers) {
    if (L.kind == AttnKind::KDA) {
      payload.push_back(std::as_bytes(std::span<const float>(L.kda.S)));
      payload.push_back(std::as_bytes(std::span<const float>(L.kda.conv)));
    } else {
      payload.push_back(std::as_bytes(std::span<const float>(L.mla.rows)));
    }
  }
  write_state_file(file, kSequenceStateFile, hs, payload, "sequence state");
}

SequenceState SequenceState::load(const std::filesystem::path& file, const ModelConfig& cfg, SequenceFileMeta* meta,
                                  const std::string& expect_fingerprint) {
  return load_sequence_state(file, cfg, 0, 1, meta, expect_fingerprint);
}

SequenceState load_sequence_state(const std::filesystem::path& file, const ModelConfig& cfg, int rank, int ranks,
                                  SequenceFileMeta* meta, const std::string& expect_fingerprint) {
  using Impl = SequenceState::Impl;
  const std::string fn = file.string();
  std::error_code ec0;
  if (std::filesystem::exists(file, ec0) && !std::filesystem::is_regular_file(file, ec0))
    throw Error("sequence state '" + fn + "': not a regular file");
  // Mapped, not copied: the payload is read once, into the state. save() replaces a file by a
  // rename, so a file being saved over is not the one mapped here.
  std::unique_ptr<MappedFile> mapped;
  try {
    mapped = std::make_unique<MappedFile>(file);
  } catch (const Error& e) {
    throw Error(std::string("sequence state: ") + e.what());
  }
  const MappedFile& mf = *mapped;
  const StateFileView view = parse_state_file(mf.bytes(), kSequenceStateFile, fn, "sequence state");
  std::span<const uint8_t> rest = view.payload;
  const std::string_view hs = view.header;
  const SequenceStateHeader h = parse_sequence_state_header(hs, fn);
  const uint64_t file_bytes = mf.size();
  SequenceState s;
  Impl& si = state_impl(s);
  si = Impl::fresh(cfg, rank, ranks);
  if (h.rank != rank || h.ranks != ranks)
    throw Error("sequence state '" + fn + "': saved by rank " + std::to_string(h.rank) + " of " +
                std::to_string(h.ranks) + ", this is rank " + std::to_string(rank) + " of " + std::to_string(ranks) +
                " (each rank holds its own heads' KDA state: restore under the rank count it was saved with)");
  try {
    const std::string& fp = h.fingerprint;
    if (!expect_fingerprint.empty() && fp != expect_fingerprint)
      throw Error("sequence state '" + fn + "': saved by another model or numeric path (fingerprint " + fp +
                  "), this model is " + expect_fingerprint);
    if (meta != nullptr) {
      meta->fingerprint = fp;
      meta->ids = h.ids;
      meta->extra_json = h.extra_json;
    }
    const int64_t n_past = h.n_past;
    const auto& layers = h.layers;
    if (n_past < 0 || layers.size() != cfg.plan.size())
      throw Error("sequence state '" + fn + "': records " + std::to_string(layers.size()) + " layers, model has " +
                  std::to_string(cfg.plan.size()));
    si.n_past = n_past;
    const MlaDims md = MlaDims::from(cfg);
    auto get = [&](std::vector<float>& v, uint64_t floats, size_t il) {
      if (floats != v.size())
        throw Error("sequence state '" + fn + "': layer " + std::to_string(il) + " holds " + std::to_string(floats) +
                    " floats, model expects " + std::to_string(v.size()));
      if (rest.size() < v.size() * 4)
        throw Error("sequence state '" + fn + "': truncated payload at layer " + std::to_string(il));
      if (!v.empty()) std::memcpy(v.data(), rest.data(), v.size() * 4);
      rest = rest.subspan(v.size() * 4);
    };
    for (size_t il = 0; il < layers.size(); ++il) {
      const auto& L = layers[il];
      LayerState& st = si.layers[il];
      const std::string kind = L.at("kind").get<std::string>();
      const std::string want = st.kind == AttnKind::KDA ? "kda" : "mla";
      if (kind != want)
        throw Error("sequence state '" + fn + "': layer " + std::to_string(il) + " is " + kind + ", model layer is " +
                    want);
      auto check_shape = [&](const char* key, const Shape& want_shape) {
        const Shape found = L.at(key).get<Shape>();
        if (found != want_shape) {
          auto str = [](const Shape& v) {
            std::string r = "[";
            for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + std::to_string(v[i]);
            return r + "]";
          };
          throw Error("sequence state '" + fn + "': layer " + std::to_string(il) + " " + key + " is " + str(found) +
                      ", model expects " + str(want_shape));
        }
      };
      if (st.kind == AttnKind::KDA) {
        check_shape("S_shape", kda_s_shape(st.kda_dims));
        check_shape("conv_shape", kda_conv_shape(st.kda_dims));
        get(st.kda.S, L.at("S_floats").get<uint64_t>(), il);
        get(st.kda.conv, L.at("conv_floats").get<uint64_t>(), il);
      } else {
        check_shape("cache_shape", Shape{n_past, md.row()});
        if (static_cast<uint64_t>(n_past) > file_bytes / 4 / static_cast<uint64_t>(md.row()))
          throw Error("sequence state '" + fn + "': layer " + std::to_string(il) + " claims " + std::to_string(n_past) +
                      " cached tokens, more than the file holds");
        st.mla.rows.resize(static_cast<size_t>(n_past * md.row()));
        get(st.mla.rows, L.at("cache_floats").get<uint64_t>(), il);
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error("sequence state '" + fn + "': malformed header: " + e.what());
  }
  if (!rest.empty())
    throw Error("sequence state '" + fn + "': " + std::to_string(rest.size()) +
                " payload bytes past the layers its header describes");
  if (meta != nullptr && !meta->ids.empty() && static_cast<int64_t>(meta->ids.size()) != si.n_past)
    throw Error("sequence state '" + fn + "': records " + std::to_string(meta->ids.size()) + " ids for " +
                std::to_string(si.n_past) + " tokens");
  si.check_matches(cfg, "sequence state '" + fn + "'", rank, ranks);
  return s;
}

}  // namespace k3
