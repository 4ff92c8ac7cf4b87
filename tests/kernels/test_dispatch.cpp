// ISA selection (the registry: cpuid, names, select_isa for K3_ISA / --k3-isa) and the thread helper.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/cpu_features.h"
#include "kernels/dispatch.h"
#include "kernels/threads.h"

namespace {

TEST(Dispatch, NamesAndEnvOverride) {
  const auto& isas = k3test::isas_under_test();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), k3::Isa::Scalar);
  for (k3::Isa i : {k3::Isa::Scalar, k3::Isa::Avx2, k3::Isa::Avx512}) EXPECT_EQ(k3::isa_from_name(k3::isa_name(i)), i);
  EXPECT_THROW(k3::isa_from_name("sse9"), k3::Error);
  EXPECT_EQ(k3::select_isa(std::string_view()), isas.back());
  EXPECT_EQ(k3::select_isa(""), isas.back());
  EXPECT_EQ(k3::select_isa("scalar"), k3::Isa::Scalar);
  EXPECT_THROW(k3::select_isa("neon"), k3::Error);
  for (k3::Isa i : {k3::Isa::Avx2, k3::Isa::Avx512}) {
    if (k3::isa_supported(i)) {
      EXPECT_EQ(k3::select_isa(k3::isa_name(i)), i);
      EXPECT_STREQ(k3::kernels_for(i).isa_name, k3::isa_name(i));
    } else {  // refused with a clear message
      try {
        k3::select_isa(k3::isa_name(i));
        ADD_FAILURE();
      } catch (const k3::Error& e) {
        EXPECT_NE(std::string(e.what()).find("not supported on this CPU"), std::string::npos);
      }
      EXPECT_THROW(k3::kernels_for(i), k3::Error);
    }
  }
  std::printf("[kernels] active ISA: %s\n", k3::isa_name(k3::active_isa()));
  EXPECT_TRUE(k3::isa_supported(k3::active_isa()));
  EXPECT_EQ(k3::cpu_features().avx512, k3::isa_supported(k3::Isa::Avx512));
}

TEST(Dispatch, OneRegistryNamesDetectsAndTables) {
  const auto reg = k3::isa_registry();
  ASSERT_FALSE(reg.empty());
  EXPECT_EQ(reg.front().isa, k3::Isa::Scalar);
  std::vector<k3::Isa> supported;
  for (size_t i = 0; i < reg.size(); ++i) {
    EXPECT_STREQ(k3::isa_name(reg[i].isa), reg[i].name);
    for (size_t j = 0; j < i; ++j) EXPECT_STRNE(reg[i].name, reg[j].name);
    EXPECT_EQ(reg[i].supported(), k3::isa_supported(reg[i].isa));
    if (!reg[i].supported()) continue;
    supported.push_back(reg[i].isa);
    EXPECT_STREQ(reg[i].table().isa_name, reg[i].name);
    EXPECT_EQ(&reg[i].table(), &k3::kernels_for(reg[i].isa));
    EXPECT_NE(reg[i].table().kda_chunk_heads, nullptr);
    EXPECT_NE(reg[i].table().kda_decode_heads, nullptr);
    EXPECT_NE(reg[i].table().quant_rows, nullptr);
  }
  EXPECT_EQ(supported, k3::supported_isas());
  EXPECT_EQ(k3::best_isa(), supported.back());
  try {
    (void)k3::select_isa("neon", "K3_ISA");
    ADD_FAILURE();
  } catch (const k3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("K3_ISA must be one of: scalar, avx2, avx512"), std::string::npos) << e.what();
  }
}

TEST(Threads, ParallelForCoversRangeOnceAndRethrows) {
  const int saved = k3::num_threads();
  for (int nt : {1, 2, 3}) {
    k3::set_num_threads(nt);
    for (int64_t n : {0, 1, 15, 16, 17, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      k3::parallel_for(n, 16, [&](int64_t b, int64_t e) {
        EXPECT_TRUE(b % 16 == 0);
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1);
    }
    EXPECT_THROW(k3::parallel_for(100, 1,
                                  [](int64_t b, int64_t) {
                                    if (b == 0) throw std::runtime_error("x");
                                  }),
                 std::runtime_error);
  }
  k3::set_num_threads(saved);
  EXPECT_GE(k3::num_threads(), 1);
}

}  // namespace
