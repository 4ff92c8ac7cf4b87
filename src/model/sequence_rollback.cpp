#include "model/sequence_rollback.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "model/sequence_state.h"

namespace k3 {

namespace {

const SequenceState::Impl& impl_of(const SequenceState& seq, const char* what) {
  if (!seq.impl) throw Error(std::string(what) + ": moved-from sequence state");
  return *seq.impl;
}

SequenceState::Impl& impl_of(SequenceState& seq, const char* what) {
  if (!seq.impl) throw Error(std::string(what) + ": moved-from sequence state");
  return *seq.impl;
}

int64_t n_kda_layers(const SequenceState::Impl& s) {
  return std::count_if(s.layers.begin(), s.layers.end(), [](const LayerState& L) { return L.kind == AttnKind::KDA; });
}

void truncate_mla(SequenceState::Impl& s, int64_t n_past) {
  for (LayerState& L : s.layers)
    if (L.kind == AttnKind::MLA) L.mla.rows.resize(static_cast<size_t>(n_past * L.mla_dims.row()));
  s.n_past = n_past;
}

}  // namespace

int64_t kda_record_floats(const SequenceState& seq) {
  for (const LayerState& L : impl_of(seq, "kda_record_floats").layers)
    if (L.kind == AttnKind::KDA) return static_cast<int64_t>(L.kda.S.size() + L.kda.conv.size());
  return 0;
}

void rollback_to_step(SequenceState& seq, const std::vector<float>& steps, int64_t n_window, int64_t n_keep) {
  SequenceState::Impl& s = impl_of(seq, "rollback");
  if (n_window < 1 || n_window > s.n_past)
    throw Error("rollback: window of " + std::to_string(n_window) + " tokens but the state holds " +
                std::to_string(s.n_past));
  if (n_keep < 1 || n_keep > n_window)
    throw Error("rollback: keep " + std::to_string(n_keep) + " of a " + std::to_string(n_window) +
                "-token window (expected 1.." + std::to_string(n_window) + ")");
  const int64_t R = kda_record_floats(seq), nk = n_kda_layers(s);
  if (static_cast<int64_t>(steps.size()) != nk * n_window * R)
    throw Error("rollback: step log holds " + std::to_string(steps.size()) + " floats, expected " +
                std::to_string(nk) + " KDA layers x " + std::to_string(n_window) + " tokens x " +
                std::to_string(R));
  const int64_t start = s.n_past - n_window;
  if (n_keep == n_window) return;
  int64_t l = 0;
  for (LayerState& L : s.layers) {
    if (L.kind != AttnKind::KDA) continue;
    const float* rec = steps.data() + (l * n_window + (n_keep - 1)) * R;
    std::copy_n(rec, L.kda.S.size(), L.kda.S.begin());
    std::copy_n(rec + L.kda.S.size(), L.kda.conv.size(), L.kda.conv.begin());
    ++l;
  }
  truncate_mla(s, start + n_keep);
}

std::vector<float> capture_kda(const SequenceState& seq) {
  std::vector<float> out;
  for (const LayerState& L : impl_of(seq, "capture_kda").layers)
    if (L.kind == AttnKind::KDA) {
      out.insert(out.end(), L.kda.S.begin(), L.kda.S.end());
      out.insert(out.end(), L.kda.conv.begin(), L.kda.conv.end());
    }
  return out;
}

void restore_kda(SequenceState& seq, const std::vector<float>& snapshot, int64_t n_past) {
  SequenceState::Impl& s = impl_of(seq, "restore_kda");
  const int64_t R = kda_record_floats(seq), nk = n_kda_layers(s);
  if (static_cast<int64_t>(snapshot.size()) != nk * R)
    throw Error("restore_kda: snapshot holds " + std::to_string(snapshot.size()) + " floats, expected " +
                std::to_string(nk * R));
  if (n_past < 0 || n_past > s.n_past)
    throw Error("restore_kda: n_past " + std::to_string(n_past) + " outside [0, " + std::to_string(s.n_past) + "]");
  const float* p = snapshot.data();
  for (LayerState& L : s.layers) {
    if (L.kind != AttnKind::KDA) continue;
    std::copy_n(p, L.kda.S.size(), L.kda.S.begin());
    std::copy_n(p + L.kda.S.size(), L.kda.conv.size(), L.kda.conv.begin());
    p += R;
  }
  truncate_mla(s, n_past);
}

}  // namespace k3
