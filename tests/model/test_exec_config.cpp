// The execution config as a value (kernels/exec_config.h): resolution against the process
// default, scopes, and two models with different configs in one process — each bit-identical to
// itself alone, interleaved on one thread and run concurrently on two.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "core/error.h"
#include "io/checkpoint.h"
#include "kernels/dispatch.h"
#include "kernels/exec_config.h"
#include "kernels/threads.h"
#include "model/k3_model.h"
#include "runtime/model_fingerprint.h"
#include "test_util.h"

namespace {

std::vector<int32_t> ids_of(int n, int64_t vocab, int seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<int32_t>((i * 131 + seed * 17 + 7) % vocab);
  return v;
}

/// Prefill of `prompt` (all logits) then `n` one-token steps over `next`; every logits row.
std::vector<float> run(const k3::Model& m, const std::vector<int32_t>& prompt, const std::vector<int32_t>& next) {
  auto seq = m.new_sequence();
  std::vector<float> all = m.forward(seq, prompt, true);
  for (int32_t id : next) {
    const std::vector<float> l = m.forward(seq, std::span<const int32_t>(&id, 1), false);
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

k3::ModelOptions config_a() {  // baseline ISA, exact numerics, one worker
  k3::ModelOptions o;
  o.exec.isa = k3::Isa::Scalar;
  o.exec.kernels = k3::ModelKernels::Fast;
  o.exec.numerics = k3::Numerics::Exact;
  o.exec.threads = 1;
  return o;
}
k3::ModelOptions config_b() {  // the best ISA, bf16 trunk + int8 experts, two workers
  k3::ModelOptions o;
  o.exec.isa = k3::best_isa();
  o.exec.kernels = k3::ModelKernels::Fast;
  o.exec.numerics = k3::Numerics::Bf16;
  o.exec.threads = 2;
  o.prefill_chunk = 64;
  return o;
}

TEST(ExecConfig, ResolvesUnsetFieldsAndNamesBadIsas) {
  const k3::ExecContext best = k3::resolve_exec_config(k3::ExecConfig{.isa = k3::best_isa(),
                                                                      .kernels = k3::ModelKernels::Fast,
                                                                      .numerics = k3::Numerics::Mxfp8,
                                                                      .mxfp4 = std::nullopt,
                                                                      .threads = 0});
  EXPECT_EQ(best.isa, k3::best_isa());
  EXPECT_EQ(best.kt, &k3::kernels_for(k3::best_isa()));
  EXPECT_EQ(best.mxfp4, k3::Mxfp4Path::Mxfp8);  // the mode's expert path
  EXPECT_EQ(best.threads, 0);
  EXPECT_EQ(k3::numerics_mxfp4_path(k3::Numerics::Exact), k3::Mxfp4Path::ExactF32);
  EXPECT_EQ(k3::numerics_mxfp4_path(k3::Numerics::Int8), k3::Mxfp4Path::Int8);
  EXPECT_EQ(k3::numerics_mxfp4_path(k3::Numerics::Bf16), k3::Mxfp4Path::Int8);
  k3::ExecConfig c;
  c.numerics = k3::Numerics::Bf16;
  c.mxfp4 = k3::Mxfp4Path::ExactF32;  // an explicit path wins over the mode's
  const k3::ExecContext x = k3::resolve_exec_config(c);
  EXPECT_EQ(x.mxfp4, k3::Mxfp4Path::ExactF32);
  const k3::ExecContext again = k3::resolve_exec_config(x.config());  // resolving twice: the same
  EXPECT_EQ(again.isa, x.isa);
  EXPECT_EQ(again.numerics, x.numerics);
  EXPECT_EQ(again.mxfp4, x.mxfp4);
  EXPECT_EQ(again.kernels, x.kernels);
  for (k3::Isa i : {k3::Isa::Avx2, k3::Isa::Avx512})
    if (!k3::isa_supported(i)) {
      k3::ExecConfig bad;
      bad.isa = i;
      EXPECT_THROW((void)k3::resolve_exec_config(bad), k3::Error);
    }
  EXPECT_THROW((void)k3::parse_model_kernels("slow", "K3_KERNELS"), k3::Error);
  EXPECT_THROW((void)k3::parse_mxfp4_path("fp4", "K3_MXFP4"), k3::Error);
  EXPECT_EQ(k3::parse_mxfp4_path("exact", "K3_MXFP4"), k3::Mxfp4Path::ExactF32);
}

TEST(ExecConfig, ScopesInstallAContextAndParallelForCarriesIt) {
  const k3::ExecContext scalar = k3::resolve_exec_config(k3::ExecConfig{.isa = k3::Isa::Scalar,
                                                                        .kernels = std::nullopt,
                                                                        .numerics = k3::Numerics::Bf16,
                                                                        .mxfp4 = std::nullopt,
                                                                        .threads = 3});
  const k3::ExecContext* outside = &k3::exec_context();
  {
    const k3::ExecScope scope(scalar);
    EXPECT_EQ(&k3::exec_context(), &scalar);
    EXPECT_EQ(k3::active_isa(), k3::Isa::Scalar);
    EXPECT_STREQ(k3::kernels().isa_name, "scalar");
    EXPECT_EQ(k3::numerics_mode(), k3::Numerics::Bf16);
    EXPECT_EQ(k3::num_threads(), 3);
    std::vector<const k3::ExecContext*> seen(64, nullptr);
    k3::parallel_for(64, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)] = &k3::exec_context();
    });
    for (const k3::ExecContext* s : seen) EXPECT_EQ(s, &scalar);
  }
  EXPECT_EQ(&k3::exec_context(), outside);
}

// Two models of one checkpoint with different configs: each one's logits are the same bits
// alone, interleaved with the other on one thread, and run concurrently on two threads.
TEST(ExecConfig, TwoModelsWithDifferentConfigsInOneProcess) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("k3", 1));
  const k3::Model a(*ck, config_a()), b(*ck, config_b());
  EXPECT_EQ(*a.options().exec.isa, k3::Isa::Scalar);
  EXPECT_EQ(*b.options().exec.numerics, k3::Numerics::Bf16);
  EXPECT_EQ(*b.options().exec.mxfp4, k3::Mxfp4Path::Int8);
  const int64_t V = a.config().vocab_size;
  const auto prompt = ids_of(150, V, 3), next = ids_of(6, V, 9);
  const std::vector<float> alone_a = run(a, prompt, next), alone_b = run(b, prompt, next);
  ASSERT_FALSE(same_bits(alone_a, alone_b));  // the configs do compute differently

  {  // interleaved on this thread: a's prefill, b's prefill, then alternate decode steps
    auto sa = a.new_sequence(), sb = b.new_sequence();
    std::vector<float> ia = a.forward(sa, prompt, true), ib = b.forward(sb, prompt, true);
    for (int32_t id : next) {
      const auto la = a.forward(sa, std::span<const int32_t>(&id, 1), false);
      const auto lb = b.forward(sb, std::span<const int32_t>(&id, 1), false);
      ia.insert(ia.end(), la.begin(), la.end());
      ib.insert(ib.end(), lb.begin(), lb.end());
    }
    EXPECT_TRUE(same_bits(ia, alone_a));
    EXPECT_TRUE(same_bits(ib, alone_b));
  }
  {  // concurrently
    std::vector<float> ca, cb;
    std::thread ta([&] { ca = run(a, prompt, next); });
    std::thread tb([&] { cb = run(b, prompt, next); });
    ta.join();
    tb.join();
    EXPECT_TRUE(same_bits(ca, alone_a));
    EXPECT_TRUE(same_bits(cb, alone_b));
  }
  // The fingerprint follows each model's config, not a process global.
  const k3::Model a2(*ck, config_a());
  EXPECT_EQ(k3::model_fingerprint(*ck, a), k3::model_fingerprint(*ck, a2));
  EXPECT_NE(k3::model_fingerprint(*ck, a), k3::model_fingerprint(*ck, b));
}

}  // namespace
