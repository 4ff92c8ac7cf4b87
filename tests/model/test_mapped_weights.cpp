// The mapped bytes a model reads (Model::mapped_weight_ranges, model/weights.h) and their page-in
// (core/page_in.h, `--warm`) on a tiny checkpoint: each range is exactly one checkpoint tensor's
// bytes, the tensors left out are the vectors decoded at bind time, streamed experts and
// quantized trunk matrices are left out, and the page-in over the ranges counts the distinct
// pages a plain set finds, reports progress from 0 to that total and leaves every page resident.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "core/page_in.h"
#include "io/checkpoint.h"
#include "io/expert_store.h"
#include "model/k3_model.h"
#include "test_util.h"

namespace {

const uintptr_t kPage = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));

/// For each range, the name of the checkpoint tensor whose bytes it is exactly ("" if none).
std::vector<std::string> tensor_of_each(const k3::Checkpoint& ck, const std::vector<std::span<const uint8_t>>& ranges) {
  std::map<std::pair<const uint8_t*, uint64_t>, std::string> by_bytes;
  for (const k3::TensorView& t : ck.tensors()) by_bytes[{t.data, t.nbytes}] = t.name;
  std::vector<std::string> out;
  for (auto r : ranges) {
    auto it = by_bytes.find({r.data(), r.size()});
    out.push_back(it == by_bytes.end() ? "" : it->second);
  }
  return out;
}

uint64_t total_bytes(const std::vector<std::span<const uint8_t>>& ranges) {
  uint64_t n = 0;
  for (auto r : ranges) n += r.size();
  return n;
}

}  // namespace

TEST(MappedWeights, EachRangeIsOneTensorAndOnlyBindTimeVectorsAreLeftOut) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("k3", 1));
  const k3::Model m(*ck);
  const auto ranges = m.mapped_weight_ranges();
  ASSERT_FALSE(ranges.empty());
  const auto names = tensor_of_each(*ck, ranges);
  std::set<std::string> covered;
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_NE(names[i], "") << "range " << i << " is not a checkpoint tensor's bytes";
    covered.insert(names[i]);
  }
  // Left out: the vectors decoded to fp32 at bind time, and the vision tower and its projector
  // (read by the image encoder, not by the text model's forward pass).
  const std::regex decoded(
      ".*(norm\\.weight|_norm|res_proj\\.weight|conv1d\\.weight|dt_bias|A_log|e_score_correction_bias)$");
  int n_experts = 0;
  for (const k3::TensorView& t : ck->tensors()) {
    if (covered.count(t.name)) {
      n_experts += t.name.find(".experts.") != std::string::npos;
      continue;
    }
    if (t.name.rfind("vision_tower.", 0) == 0 || t.name.rfind("mm_projector.", 0) == 0) continue;
    EXPECT_TRUE(std::regex_match(t.name, decoded)) << t.name << " is read by the model but not in its ranges";
  }
  EXPECT_GT(n_experts, 0);  // the routed experts are mapped: in
}

TEST(MappedWeights, StreamedExpertsAndQuantizedTrunkAreLeftOut) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("k3", 1));
  const auto all = k3::Model(*ck).mapped_weight_ranges();
  k3::ModelOptions streamed;
  streamed.expert_store = std::make_shared<k3::ExpertStore>(*ck, k3::ExpertStoreOptions{});
  const auto no_experts = k3::Model(*ck, streamed).mapped_weight_ranges();
  for (const std::string& n : tensor_of_each(*ck, no_experts))
    EXPECT_EQ(n.find(".experts."), std::string::npos) << n << ": a streamed expert in the ranges";
  uint64_t expert_bytes = 0;
  for (const k3::TensorView& t : ck->tensors())
    if (t.name.find(".experts.") != std::string::npos) expert_bytes += t.nbytes;
  EXPECT_EQ(total_bytes(all) - total_bytes(no_experts), expert_bytes);

  k3::ModelOptions q8;
  q8.exec.kernels = k3::ModelKernels::Fast;
  q8.trunk_quant = k3::QuantKind::Q8;
  const auto quant = k3::Model(*ck, q8).mapped_weight_ranges();
  const auto names = tensor_of_each(*ck, quant);
  const std::set<std::string> kept(names.begin(), names.end());
  EXPECT_LT(total_bytes(quant), total_bytes(all));
  EXPECT_TRUE(kept.count(ck->find("model.embed_tokens.weight")->name));                // row lookups: BF16, kept
  EXPECT_FALSE(kept.count(ck->find("model.layers.0.self_attn.o_proj.weight")->name));  // quantized: out
}

TEST(MappedWeights, PageInCountsTheirPagesReportsProgressAndLeavesThemResident) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("k3", 1));
  const k3::Model m(*ck);
  const auto ranges = m.mapped_weight_ranges();
  std::set<uintptr_t> pages;  // the plain reference
  for (auto r : ranges)
    for (uintptr_t p = reinterpret_cast<uintptr_t>(r.data()) / kPage;
         p <= (reinterpret_cast<uintptr_t>(r.data()) + r.size() - 1) / kPage; ++p)
      pages.insert(p);
  std::vector<std::pair<int64_t, int64_t>> calls;
  k3::PageInOptions o;
  o.threads = 4;
  o.chunk_bytes = 64 * 1024;
  const k3::PageInStats st = k3::page_in(ranges, o, [&](std::string_view what, int64_t done, int64_t total) {
    EXPECT_EQ(what, "page-in");
    calls.emplace_back(done, total);  // page_in makes one call at a time
  });
  EXPECT_EQ(st.bytes, pages.size() * kPage);
  EXPECT_EQ(st.resident_bytes + st.read_bytes, st.bytes);
  ASSERT_GE(calls.size(), 2u);
  EXPECT_EQ(calls.front().first, 0);
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_GE(calls[i].first, calls[i - 1].first);
  EXPECT_EQ(calls.back().first, static_cast<int64_t>(st.bytes));
  for (const auto& c : calls) EXPECT_EQ(c.second, static_cast<int64_t>(st.bytes));
  for (uintptr_t p : pages) {
    unsigned char v = 0;
    ASSERT_EQ(mincore(reinterpret_cast<void*>(p * kPage), kPage, &v), 0);
    EXPECT_EQ(v & 1, 1) << "page " << p << " not resident";
  }
  const k3::PageInStats again = k3::page_in(ranges, o);
  EXPECT_EQ(again.resident_bytes, st.bytes);
  EXPECT_EQ(again.read_bytes, 0u);
}
