#include "model/sequence_state.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include <zlib.h>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_depth.h"
#include "model/state_header.h"

namespace k3 {

namespace {

constexpr char kMagic[8] = {'K', '3', 'S', 'E', 'Q', 'S', 'T', '1'};
constexpr int kVersion = kSequenceStateVersion;

using Shape = std::vector<int64_t>;

Shape kda_s_shape(const KdaDims& d) { return {d.H, d.d, d.d}; }
Shape kda_conv_shape(const KdaDims& d) { return {3, d.K - 1, d.C()}; }

}  // namespace

SequenceState::Impl SequenceState::Impl::fresh(const ModelConfig& cfg) {
  Impl s;
  s.layers.resize(cfg.plan.size());
  for (size_t il = 0; il < cfg.plan.size(); ++il) {
    LayerState& L = s.layers[il];
    L.kind = cfg.plan[il].attn;
    if (L.kind == AttnKind::KDA) {
      L.kda_dims = KdaDims::from(cfg);
      L.kda = KdaState::zeros(L.kda_dims);
    } else {
      L.mla_dims = MlaDims::from(cfg);
    }
  }
  return s;
}

void SequenceState::Impl::check_matches(const ModelConfig& cfg, const std::string& what) const {
  if (failed)
    throw Error(what + ": sequence state was left inconsistent by a failed forward pass; "
                "start a new sequence or restore a saved/forked state");
  if (layers.size() != cfg.plan.size())
    throw Error(what + ": sequence state has " + std::to_string(layers.size()) +
                " layers, model expects " + std::to_string(cfg.plan.size()));
  for (size_t il = 0; il < layers.size(); ++il) {
    const LayerState& L = layers[il];
    if (L.kind != cfg.plan[il].attn)
      throw Error(what + ": layer " + std::to_string(il) + " state is " +
                  (L.kind == AttnKind::KDA ? "KDA" : "MLA") + ", model layer is " +
                  (cfg.plan[il].attn == AttnKind::KDA ? "KDA" : "MLA"));
    if (L.kind == AttnKind::KDA) {
      const KdaState ref = KdaState::zeros(KdaDims::from(cfg));
      if (L.kda.S.size() != ref.S.size() || L.kda.conv.size() != ref.conv.size())
        throw Error(what + ": layer " + std::to_string(il) + " KDA state holds " +
                    std::to_string(L.kda.S.size()) + " + " + std::to_string(L.kda.conv.size()) +
                    " floats, model expects " + std::to_string(ref.S.size()) + " + " +
                    std::to_string(ref.conv.size()));
    } else {
      const MlaDims d = MlaDims::from(cfg);
      if (L.mla.rows.size() != static_cast<size_t>(n_past * d.row()))
        throw Error(what + ": layer " + std::to_string(il) + " MLA cache holds " +
                    std::to_string(L.mla.rows.size()) + " floats, expected " +
                    std::to_string(n_past) + " tokens x " + std::to_string(d.row()));
    }
  }
}

SequenceState::SequenceState() : impl(std::make_shared<Impl>()) {}
SequenceState::SequenceState(const SequenceState& o) : impl(std::make_shared<Impl>(*o.impl)) {}
SequenceState& SequenceState::operator=(const SequenceState& o) {
  if (this != &o) impl = std::make_shared<Impl>(*o.impl);
  return *this;
}
SequenceState::SequenceState(SequenceState&& o) noexcept = default;
SequenceState& SequenceState::operator=(SequenceState&& o) noexcept = default;
SequenceState::~SequenceState() = default;

int64_t SequenceState::n_past() const { return impl ? impl->n_past : 0; }

uint64_t SequenceState::bytes() const {
  uint64_t b = 0;
  if (!impl) return 0;
  for (const LayerState& L : impl->layers) b += L.kind == AttnKind::KDA ? L.kda.bytes() : L.mla.bytes();
  return b;
}

// File: 8-byte magic "K3SEQST1", u64 little-endian header length, JSON header
// {"format","version","n_past","model_fingerprint","ids","extra","layers":[{il, kind, dims...,
// "floats": n}]}, then the fp32 payload of each layer in order (KDA: S then conv; MLA: cache
// rows), then a u32 CRC-32 (zlib) of every byte before it.
void SequenceState::save(const std::filesystem::path& file, const SequenceFileMeta& meta) const {
  if (!impl) throw Error("sequence state: save of a moved-from state");
  if (impl->failed) throw Error("sequence state: save of a state left inconsistent by a failed forward pass");
  if (!meta.ids.empty() && static_cast<int64_t>(meta.ids.size()) != impl->n_past)
    throw Error("sequence state '" + file.string() + "': " + std::to_string(meta.ids.size()) +
                " ids recorded for a state of " + std::to_string(impl->n_past) + " tokens");
  nlohmann::ordered_json h;
  h["format"] = "k3-sequence-state";
  h["version"] = kVersion;
  h["n_past"] = impl->n_past;
  h["model_fingerprint"] = meta.fingerprint;
  h["ids"] = meta.ids;
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
  for (size_t il = 0; il < impl->layers.size(); ++il) {
    const LayerState& L = impl->layers[il];
    if (L.kind == AttnKind::KDA)
      layers.push_back({{"il", il}, {"kind", "kda"},
                        {"S_shape", kda_s_shape(L.kda_dims)}, {"S_layout", "[H, d_k, d_v] fp32 key-major"},
                        {"conv_shape", kda_conv_shape(L.kda_dims)},
                        {"conv_layout", "[q|k|v, K-1 (oldest first), C] fp32 raw projections"},
                        {"S_floats", L.kda.S.size()}, {"conv_floats", L.kda.conv.size()}});
    else
      layers.push_back({{"il", il}, {"kind", "mla"},
                        {"cache_shape", Shape{impl->n_past, L.mla_dims.row()}},
                        {"cache_layout", "[n_tokens, kv_lora_rank (normalized latent) + rope_dim (raw k_r)] fp32"},
                        {"cache_floats", L.mla.rows.size()}});
  }
  h["layers"] = layers;
  const std::string hs = h.dump();
  // A fresh temporary file beside `file`, renamed onto it once complete (core/atomic_file.h).
  AtomicFile f(file.parent_path(), file.filename().string(), "sequence state");
  const uint64_t n = hs.size();
  uLong crc = crc32(0, nullptr, 0);
  auto write = [&](const void* p, size_t bytes) {
    if (bytes == 0) return;
    f.write(p, bytes);
    for (size_t off = 0; off < bytes; off += 1u << 30)
      crc = crc32(crc, static_cast<const Bytef*>(p) + off, static_cast<uInt>(std::min<size_t>(bytes - off, 1u << 30)));
  };
  write(kMagic, 8);
  write(&n, 8);
  write(hs.data(), n);
  auto put = [&](const std::vector<float>& v) { write(v.data(), v.size() * 4); };
  for (const LayerState& L : impl->layers) {
    if (L.kind == AttnKind::KDA) {
      put(L.kda.S);
      put(L.kda.conv);
    } else {
      put(L.mla.rows);
    }
  }
  const uint32_t c32 = static_cast<uint32_t>(crc);
  f.write(&c32, 4);
  f.commit();
}

SequenceState SequenceState::load(const std::filesystem::path& file, const ModelConfig& cfg, SequenceFileMeta* meta,
                                  const std::string& expect_fingerprint) {
  const std::string fn = file.string();
  std::error_code ec0;
  if (std::filesystem::exists(file, ec0) && !std::filesystem::is_regular_file(file, ec0))
    throw Error("sequence state '" + fn + "': not a regular file");
  std::ifstream f(file, std::ios::binary);
  if (!f) throw Error("sequence state: cannot open '" + fn + "'");
  uLong crc = crc32(0, nullptr, 0);
  auto read = [&](void* p, size_t bytes) -> bool {
    if (bytes == 0) return true;
    if (!f.read(static_cast<char*>(p), static_cast<std::streamsize>(bytes))) return false;
    for (size_t off = 0; off < bytes; off += 1u << 30)
      crc = crc32(crc, static_cast<const Bytef*>(p) + off, static_cast<uInt>(std::min<size_t>(bytes - off, 1u << 30)));
    return true;
  };
  char magic[8];
  uint64_t n = 0;
  if (!read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0)
    throw Error("sequence state '" + fn + "': bad magic, expected \"K3SEQST1\" (not a k3 sequence-state file)");
  std::error_code szec;
  const uint64_t fsize = std::filesystem::file_size(file, szec);
  if (!read(&n, 8) || n > (256u << 20) || szec || n + 20 > fsize)
    throw Error("sequence state '" + fn + "': bad header length (truncated or not a state file)");
  std::string hs(n, '\0');
  if (!read(hs.data(), n))
    throw Error("sequence state '" + fn + "': truncated header");
  const SequenceStateHeader h = parse_sequence_state_header(hs, fn);
  std::error_code ec;
  const uint64_t file_bytes = std::filesystem::file_size(file, ec);
  if (ec) throw Error("sequence state '" + fn + "': cannot stat: " + ec.message());
  SequenceState s;
  *s.impl = Impl::fresh(cfg);
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
      throw Error("sequence state '" + fn + "': records " + std::to_string(layers.size()) +
                  " layers, model has " + std::to_string(cfg.plan.size()));
    s.impl->n_past = n_past;
    const MlaDims md = MlaDims::from(cfg);
    auto get = [&](std::vector<float>& v, uint64_t floats, size_t il) {
      if (floats != v.size())
        throw Error("sequence state '" + fn + "': layer " + std::to_string(il) + " holds " +
                    std::to_string(floats) + " floats, model expects " + std::to_string(v.size()));
      if (!read(v.data(), v.size() * 4))
        throw Error("sequence state '" + fn + "': truncated payload at layer " + std::to_string(il));
    };
    for (size_t il = 0; il < layers.size(); ++il) {
      const auto& L = layers[il];
      LayerState& st = s.impl->layers[il];
      const std::string kind = L.at("kind").get<std::string>();
      const std::string want = st.kind == AttnKind::KDA ? "kda" : "mla";
      if (kind != want)
        throw Error("sequence state '" + fn + "': layer " + std::to_string(il) + " is " + kind +
                    ", model layer is " + want);
      auto check_shape = [&](const char* key, const Shape& want_shape) {
        const Shape found = L.at(key).get<Shape>();
        if (found != want_shape) {
          auto str = [](const Shape& v) {
            std::string r = "[";
            for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + std::to_string(v[i]);
            return r + "]";
          };
          throw Error("sequence state '" + fn + "': layer " + std::to_string(il) + " " + key +
                      " is " + str(found) + ", model expects " + str(want_shape));
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
          throw Error("sequence state '" + fn + "': layer " + std::to_string(il) + " claims " +
                      std::to_string(n_past) + " cached tokens, more than the file holds");
        st.mla.rows.resize(static_cast<size_t>(n_past * md.row()));
        get(st.mla.rows, L.at("cache_floats").get<uint64_t>(), il);
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error("sequence state '" + fn + "': malformed header: " + e.what());
  }
  uint32_t stored = 0;
  if (!f.read(reinterpret_cast<char*>(&stored), 4))
    throw Error("sequence state '" + fn + "': truncated (the CRC-32 at the end is missing)");
  if (stored != static_cast<uint32_t>(crc))
    throw Error("sequence state '" + fn + "': CRC-32 mismatch: the file is corrupt");
  if (f.peek() != std::char_traits<char>::eof())
    throw Error("sequence state '" + fn + "': trailing bytes after the CRC-32");
  if (meta != nullptr && !meta->ids.empty() && static_cast<int64_t>(meta->ids.size()) != s.impl->n_past)
    throw Error("sequence state '" + fn + "': records " + std::to_string(meta->ids.size()) + " ids for " +
                std::to_string(s.impl->n_past) + " tokens");
  s.impl->check_matches(cfg, "sequence state '" + fn + "'");
  return s;
}

}  // namespace k3
