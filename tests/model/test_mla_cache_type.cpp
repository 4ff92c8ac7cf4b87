// --cache-type at the model level (ModelOptions::mla_cache, model/mla.h MlaCache): the rows a
// bf16 / fp8 model appends are the encoding of the f32 model's rows, its logits stay within the
// encoding's bound of the f32 model's (fast path and oracle), a state of another type is refused
// by forward, and state files and the prefix cache's row copies refuse non-f32 caches with an
// error naming --cache-type.
#include <gtest/gtest.h>

#include <cmath>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/k3_model.h"
#include "model/sequence_state.h"
#include "test_util.h"

namespace {

struct Models {
  std::unique_ptr<k3::Checkpoint> ck;
  std::unique_ptr<k3::Model> f32, bf16, fp8, ref_bf16;
  Models() {
    ck = k3::Checkpoint::open(k3test::tiny_checkpoint("k3", 1));
    k3::ModelOptions o;
    f32 = std::make_unique<k3::Model>(*ck, o);
    o.mla_cache = k3::MlaCacheType::BF16;
    bf16 = std::make_unique<k3::Model>(*ck, o);
    o.mla_cache = k3::MlaCacheType::FP8;
    fp8 = std::make_unique<k3::Model>(*ck, o);
    o.mla_cache = k3::MlaCacheType::BF16;
    o.exec.kernels = k3::ModelKernels::Reference;
    ref_bf16 = std::make_unique<k3::Model>(*ck, o);
  }
};
Models& models() {
  static Models m;
  return m;
}

std::vector<int32_t> ids(int n, int V) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (i * 37 + 11) % V;
  return v;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const k3::Error& e) {
    return e.what();
  }
  return "";
}

TEST(MlaCacheTypeModel, Bf16AndFp8LogitsStayWithinTheirBoundOfF32) {
  Models& m = models();
  const auto prompt = ids(150, m.f32->config().vocab_size);
  auto sf = m.f32->new_sequence(), sb = m.bf16->new_sequence(), s8 = m.fp8->new_sequence(),
       sr = m.ref_bf16->new_sequence();
  const auto lf = m.f32->forward(sf, prompt, false);
  const auto lb = m.bf16->forward(sb, prompt, false);
  const auto l8 = m.fp8->forward(s8, prompt, false);
  const auto lr = m.ref_bf16->forward(sr, prompt, false);
  EXPECT_EQ(sb.mla_cache_type(), k3::MlaCacheType::BF16);
  EXPECT_EQ(s8.mla_cache_type(), k3::MlaCacheType::FP8);
  // bytes: f32 rows 4 B per value; bf16 2 B; fp8 1 B per latent value + a scale + 2 B per rope value
  EXPECT_LT(sb.bytes(), sf.bytes());
  EXPECT_LT(s8.bytes(), sb.bytes());
  const double eb = k3test::rel_l2(lb.data(), lf.data(), lf.size()), e8 = k3test::rel_l2(l8.data(), lf.data(), lf.size());
  std::printf("[cache-type] logits rel-L2 vs f32: bf16 %.2e, fp8 %.2e\n", eb, e8);
  EXPECT_GT(eb, 0.0);  // the rows really are rounded
  EXPECT_LT(eb, 1e-2);
  EXPECT_LT(e8, 1e-1);
  // the oracle reads the same encoded rows: fast vs reference on a bf16 cache as on f32
  EXPECT_LT(k3test::rel_l2(lr.data(), lb.data(), lb.size()), 1e-4);
  // decode steps on top read the encoded cache too
  const int32_t next = 5;
  const auto db = m.bf16->forward(sb, std::span<const int32_t>(&next, 1), false);
  const auto df = m.f32->forward(sf, std::span<const int32_t>(&next, 1), false);
  EXPECT_LT(k3test::rel_l2(db.data(), df.data(), df.size()), 1e-2);
}

TEST(MlaCacheTypeModel, AStateOfAnotherTypeAndNonF32StateFilesAndRowCopiesAreRefused) {
  Models& m = models();
  const auto prompt = ids(20, m.f32->config().vocab_size);
  auto sf = m.f32->new_sequence();
  m.f32->forward(sf, prompt, false);
  std::string e = error_of([&] { m.bf16->forward(sf, prompt, false); });
  EXPECT_NE(e.find("--cache-type"), std::string::npos) << e;
  EXPECT_NE(e.find("f32"), std::string::npos) << e;
  auto sb = m.bf16->new_sequence();
  m.bf16->forward(sb, prompt, false);
  const auto file = std::filesystem::temp_directory_path() / ("k3-test-cache-type-" + std::to_string(::getpid()));
  e = error_of([&] { sb.save(file, {}); });
  EXPECT_NE(e.find("--cache-type f32"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(file));
  std::vector<float> rows;
  e = error_of([&] { sb.copy_mla_rows(0, 10, rows); });
  EXPECT_NE(e.find("--cache-type"), std::string::npos) << e;
  e = error_of([&] { sb.append_mla_rows(rows, 0); });
  EXPECT_NE(e.find("--cache-type"), std::string::npos) << e;
  // a fork keeps the type and the rows; a rollback-free truncation is covered by fork equality
  auto fork = sb.fork();
  EXPECT_EQ(k3::state_difference(fork, sb), "");
  EXPECT_NE(k3::state_difference(sf, sb), "");
}

}  // namespace
