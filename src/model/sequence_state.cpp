// SequenceState: layout, copy, capacity, rollback and MLA rows by range (model/sequence_state.h).
#include "model/sequence_state_impl.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/error.h"

namespace k3 {

namespace {
KdaDims kda_dims_for(const ModelConfig& cfg, int rank, int ranks) {
  KdaDims d = KdaDims::from(cfg);
  d.H = split_range(d.H, ranks, rank).size();
  return d;
}
}  // namespace

SequenceState::Impl SequenceState::Impl::fresh(const ModelConfig& cfg, int rank, int ranks, MlaCacheType mla_cache) {
  Impl s;
  s.rank = rank;
  s.ranks = ranks;
  s.layers.resize(cfg.plan.size());
  for (size_t il = 0; il < cfg.plan.size(); ++il) {
    LayerState& L = s.layers[il];
    L.kind = cfg.plan[il].attn;
    if (L.kind == AttnKind::KDA) {
      L.kda_dims = kda_dims_for(cfg, rank, ranks);
      L.kda = KdaState::zeros(L.kda_dims);
      const KdaDims all = KdaDims::from(cfg);  // KdaState::zeros' sizes for every head
      s.group_snapshot_floats += all.H * all.d * all.d + 3 * (all.K - 1) * all.C();
    } else {
      L.mla_dims = MlaDims::from(cfg);
      L.mla.type = mla_cache;
    }
  }
  return s;
}

void SequenceState::Impl::check_matches(const ModelConfig& cfg, const std::string& what, int rank_, int ranks_) const {
  if (failed)
    throw Error(what +
                ": sequence state was left inconsistent by a failed forward pass; "
                "start a new sequence or restore a saved/forked state");
  if (rank != rank_ || ranks != ranks_)
    throw Error(what + ": sequence state holds the KDA heads of rank " + std::to_string(rank) + " of " +
                std::to_string(ranks) + ", this model is rank " + std::to_string(rank_) + " of " +
                std::to_string(ranks_) + " (a state is used under the rank count it was made with)");
  if (layers.size() != cfg.plan.size())
    throw Error(what + ": sequence state has " + std::to_string(layers.size()) + " layers, model expects " +
                std::to_string(cfg.plan.size()));
  for (size_t il = 0; il < layers.size(); ++il) {
    const LayerState& L = layers[il];
    if (L.kind != cfg.plan[il].attn)
      throw Error(what + ": layer " + std::to_string(il) + " state is " + (L.kind == AttnKind::KDA ? "KDA" : "MLA") +
                  ", model layer is " + (cfg.plan[il].attn == AttnKind::KDA ? "KDA" : "MLA"));
    if (L.kind == AttnKind::KDA) {
      const KdaState ref = KdaState::zeros(kda_dims_for(cfg, rank, ranks));
      if (L.kda.S.size() != ref.S.size() || L.kda.conv.size() != ref.conv.size())
        throw Error(what + ": layer " + std::to_string(il) + " KDA state holds " + std::to_string(L.kda.S.size()) +
                    " + " + std::to_string(L.kda.conv.size()) + " floats, model expects " +
                    std::to_string(ref.S.size()) + " + " + std::to_string(ref.conv.size()));
    } else {
      const MlaDims d = MlaDims::from(cfg);
      const bool f32 = L.mla.type == MlaCacheType::F32;
      const int64_t per_row = f32 ? d.row() : L.mla.row_bytes(d);
      if (L.mla.rows.size() + L.mla.enc.size() != static_cast<size_t>(n_past * per_row))
        throw Error(what + ": layer " + std::to_string(il) + " MLA cache holds " +
                    std::to_string(L.mla.rows.size() + L.mla.enc.size()) + (f32 ? " values" : " bytes") +
                    ", expected " + std::to_string(n_past) + " tokens x " + std::to_string(per_row) +
                    (f32 ? std::string(" values") : std::string(" bytes (") + mla_cache_type_name(L.mla.type) + " rows)"));
    }
  }
}

SequenceState::Impl& state_impl(SequenceState& s) {
  if (!s.impl_) throw Error("sequence state: use of a moved-from state");
  return *s.impl_;
}
const SequenceState::Impl& state_impl(const SequenceState& s) {
  if (!s.impl_) throw Error("sequence state: use of a moved-from state");
  return *s.impl_;
}

SequenceState::SequenceState() : impl_(std::make_shared<Impl>()) {}
SequenceState::SequenceState(const SequenceState& o) : impl_(std::make_shared<Impl>(state_impl(o))) {}
SequenceState& SequenceState::operator=(const SequenceState& o) {
  if (this != &o) impl_ = std::make_shared<Impl>(state_impl(o));
  return *this;
}
SequenceState::SequenceState(SequenceState&& o) noexcept = default;
SequenceState& SequenceState::operator=(SequenceState&& o) noexcept = default;
SequenceState::~SequenceState() = default;

int64_t SequenceState::n_past() const { return impl_ ? impl_->n_past : 0; }

uint64_t SequenceState::bytes() const {
  uint64_t b = 0;
  if (!impl_) return 0;
  for (const LayerState& L : impl_->layers) b += L.kind == AttnKind::KDA ? L.kda.bytes() : L.mla.bytes();
  return b;
}

void SequenceState::reserve(int64_t n_tokens) {
  if (n_tokens < 0) throw Error("sequence state: reserve of " + std::to_string(n_tokens) + " tokens (expected >= 0)");
  for (LayerState& L : state_impl(*this).layers)
    if (L.kind == AttnKind::MLA) L.mla.reserve(L.mla_dims, n_tokens);
}

void SequenceState::release_unused() {
  for (LayerState& L : state_impl(*this).layers)
    if (L.kind == AttnKind::MLA) L.mla.shrink_to_fit();
}

void SequenceState::mark_failed() { state_impl(*this).failed = true; }
bool SequenceState::failed() const { return impl_ && impl_->failed; }

int64_t SequenceState::snapshot_floats() const {
  int64_t n = 0;
  for (const LayerState& L : state_impl(*this).layers)
    if (L.kind == AttnKind::KDA) n += static_cast<int64_t>(L.kda.S.size() + L.kda.conv.size());
  return n;
}

int64_t SequenceState::group_snapshot_floats() const { return state_impl(*this).group_snapshot_floats; }

// The one packing of the KDA state: per KDA layer in layer order, S then the conv window.
StateLog SequenceState::snapshot() const {
  const Impl& s = state_impl(*this);
  std::vector<float> out;
  out.reserve(static_cast<size_t>(snapshot_floats()));
  for (const LayerState& L : s.layers)
    if (L.kind == AttnKind::KDA) {
      out.insert(out.end(), L.kda.S.begin(), L.kda.S.end());
      out.insert(out.end(), L.kda.conv.begin(), L.kda.conv.end());
    }
  return StateLog(s.n_past, 1, std::move(out));
}

void SequenceState::rollback_to(const StateLog& log, int64_t n_past) {
  Impl& s = state_impl(*this);
  if (log.empty() || n_past < log.first() || n_past > log.first() + log.points() - 1)
    throw Error("rollback: position " + std::to_string(n_past) + " is not in the state log (" +
                (log.empty() ? std::string("empty")
                             : "positions " + std::to_string(log.first()) + ".." +
                                   std::to_string(log.first() + log.points() - 1)) +
                ")");
  if (n_past > s.n_past)
    throw Error("rollback: position " + std::to_string(n_past) + " is past the state's " + std::to_string(s.n_past) +
                " tokens");
  const int64_t R = snapshot_floats();
  if (static_cast<int64_t>(log.floats().size()) != log.points() * R)
    throw Error("rollback: state log holds " + std::to_string(log.floats().size()) + " floats, expected " +
                std::to_string(log.points()) + " positions x " + std::to_string(R));
  // Layer l's records are [points, record]: the record of point p starts at l·points·rec + p·rec.
  const int64_t p = n_past - log.first();
  const float* base = log.floats().data();
  int64_t off = 0;  // floats of the KDA layers before this one, per point
  for (LayerState& L : s.layers) {
    if (L.kind != AttnKind::KDA) continue;
    const int64_t rec = static_cast<int64_t>(L.kda.S.size() + L.kda.conv.size());
    const float* r = base + off * log.points() + p * rec;
    std::copy_n(r, L.kda.S.size(), L.kda.S.begin());
    std::copy_n(r + L.kda.S.size(), L.kda.conv.size(), L.kda.conv.begin());
    off += rec;
  }
  for (LayerState& L : s.layers)
    if (L.kind == AttnKind::MLA) L.mla.truncate(L.mla_dims, n_past);
  s.n_past = n_past;
}

int64_t SequenceState::mla_token_floats() const {
  int64_t n = 0;
  for (const LayerState& L : state_impl(*this).layers)
    if (L.kind == AttnKind::MLA) n += L.mla_dims.row();
  return n;
}

MlaCacheType SequenceState::mla_cache_type() const {
  for (const LayerState& L : state_impl(*this).layers)
    if (L.kind == AttnKind::MLA) return L.mla.type;
  return MlaCacheType::F32;
}

void SequenceState::copy_mla_rows(int64_t begin, int64_t end, std::vector<float>& out) const {
  const Impl& s = state_impl(*this);
  if (mla_cache_type() != MlaCacheType::F32)
    throw Error(std::string("prefix cache: MLA rows of a ") + mla_cache_type_name(mla_cache_type()) +
                " cache cannot be stored (the prefix cache holds f32 rows; use --cache-type f32 or disable the "
                "prefix cache)");
  if (begin < 0 || begin > end || end > s.n_past)
    throw Error("sequence state: MLA rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                ") outside the state's " + std::to_string(s.n_past) + " tokens");
  for (const LayerState& L : s.layers) {
    if (L.kind != AttnKind::MLA) continue;
    const size_t row = static_cast<size_t>(L.mla_dims.row());
    const float* src = L.mla.rows.data() + static_cast<size_t>(begin) * row;
    out.insert(out.end(), src, src + static_cast<size_t>(end - begin) * row);
  }
}

void SequenceState::append_mla_rows(std::span<const float> rows, int64_t n_tokens) {
  Impl& s = state_impl(*this);
  if (mla_cache_type() != MlaCacheType::F32)
    throw Error(std::string("prefix cache: f32 MLA rows cannot be appended to a ") +
                mla_cache_type_name(mla_cache_type()) + " cache (use --cache-type f32 or disable the prefix cache)");
  if (n_tokens < 0 || static_cast<int64_t>(rows.size()) != n_tokens * mla_token_floats())
    throw Error("sequence state: " + std::to_string(rows.size()) + " floats of MLA rows for " +
                std::to_string(n_tokens) + " tokens, expected " + std::to_string(n_tokens) + " x " +
                std::to_string(mla_token_floats()));
  size_t off = 0;
  for (LayerState& L : s.layers) {
    if (L.kind != AttnKind::MLA) continue;
    const size_t n = static_cast<size_t>(n_tokens * L.mla_dims.row());
    L.mla.rows.insert(L.mla.rows.end(), rows.data() + off, rows.data() + off + n);
    off += n;
  }
  s.n_past += n_tokens;
}

namespace {

std::string first_float_difference(const std::vector<float>& x, const std::vector<float>& y) {
  if (x.size() != y.size()) return std::to_string(x.size()) + " vs " + std::to_string(y.size()) + " floats";
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t a = 0, b = 0;
    std::memcpy(&a, &x[i], 4);
    std::memcpy(&b, &y[i], 4);
    if (a != b) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "element %zu: %.9g (0x%08x) vs %.9g (0x%08x)", i, static_cast<double>(x[i]), a,
                    static_cast<double>(y[i]), b);
      return buf;
    }
  }
  return "";
}

}  // namespace

std::string state_difference(const SequenceState& a, const SequenceState& b) {
  const SequenceState::Impl &x = state_impl(a), &y = state_impl(b);
  if (x.n_past != y.n_past) return "n_past " + std::to_string(x.n_past) + " vs " + std::to_string(y.n_past);
  if (x.failed != y.failed)
    return std::string("failed ") + (x.failed ? "yes" : "no") + " vs " + (y.failed ? "yes" : "no");
  if (x.layers.size() != y.layers.size())
    return std::to_string(x.layers.size()) + " vs " + std::to_string(y.layers.size()) + " layers";
  for (size_t il = 0; il < x.layers.size(); ++il) {
    const LayerState &p = x.layers[il], &q = y.layers[il];
    const std::string at = "layer " + std::to_string(il);
    if (p.kind != q.kind) return at + " kind differs";
    std::string d;
    if (p.kind == AttnKind::KDA) {
      if (!(d = first_float_difference(p.kda.S, q.kda.S)).empty()) return at + " KDA S: " + d;
      if (!(d = first_float_difference(p.kda.conv, q.kda.conv)).empty()) return at + " KDA conv: " + d;
    } else if (p.mla.type != q.mla.type) {
      return at + " MLA cache type " + mla_cache_type_name(p.mla.type) + " vs " + mla_cache_type_name(q.mla.type);
    } else if (!(d = first_float_difference(p.mla.rows, q.mla.rows)).empty()) {
      return at + " MLA rows: " + d;
    } else if (p.mla.enc != q.mla.enc) {
      return at + " MLA encoded rows differ";
    }
  }
  return "";
}

}  // namespace k3
