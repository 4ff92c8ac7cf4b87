// kv_b split into its k_nope and v halves (model/mla.h mla_split_kv_b, kernels/mla_attend.h):
// views at the right offsets, and a clear error for a kv_b the attention cannot read.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/mla.h"
#include "model/weights.h"
#include "test_util.h"

namespace {

TEST(MlaSplitKvb, HalvesAreViewsAtEachHeadsRows) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("k3", 1));
  const k3::ModelWeights w = k3::bind_weights(*ck);
  const k3::MlaDims d = k3::MlaDims::from(ck->config());
  int checked = 0;
  for (const k3::LayerWeights& L : w.layers) {
    if (L.spec.attn != k3::AttnKind::MLA) continue;
    const k3::MlaKvbHalves h = k3::mla_split_kv_b(L.mla, d);
    const auto* base = reinterpret_cast<const uint16_t*>(L.mla.kv_b->data);
    EXPECT_EQ(h.k_nope, base);
    EXPECT_EQ(h.v, base + d.dn * d.kv_rank);
    EXPECT_EQ(h.head_stride, (d.dn + d.dv) * d.kv_rank);
    EXPECT_EQ(h.name, L.mla.kv_b->name);
    ++checked;
  }
  EXPECT_GT(checked, 0);
  const k3::MlaAttnShape s = k3::mla_attn_shape(d);
  EXPECT_EQ(s.H, d.H);
  EXPECT_EQ(s.kvr, d.kv_rank);
}

TEST(MlaSplitKvb, RefusesAnF32OrMisshapenKvb) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("k3", 1));
  const k3::ModelWeights w = k3::bind_weights(*ck);
  const k3::MlaDims d = k3::MlaDims::from(ck->config());
  for (const k3::LayerWeights& L : w.layers) {
    if (L.spec.attn != k3::AttnKind::MLA) continue;
    k3::TensorView f32 = *L.mla.kv_b;
    f32.dtype = k3::DType::F32;
    k3::MlaWeights mw = L.mla;
    mw.kv_b = &f32;
    try {
      (void)k3::mla_split_kv_b(mw, d);
      ADD_FAILURE() << "an F32 kv_b was accepted";
    } catch (const k3::Error& e) {
      EXPECT_NE(std::string(e.what()).find(L.mla.kv_b->name), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("BF16"), std::string::npos) << e.what();
    }
    k3::MlaDims wide = d;
    wide.kv_rank += 1;
    EXPECT_THROW((void)k3::mla_split_kv_b(L.mla, wide), k3::Error);
    break;
  }
}

}  // namespace
