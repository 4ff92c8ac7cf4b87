// Whole-model tests on tiny generated checkpoints (tools/reference/gen_tiny.py):
// prefill + decode == one prefill, save/restore at a position, forks and independent sequences,
// state bytes, dump names, input errors. Logits vs the fp64 reference are checked by
// tests/python/test_forward_vs_reference.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/dump.h"
#include "model/k3_model.h"
#include "model/sequence_state.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;

struct Tiny {
  std::unique_ptr<k3::Checkpoint> ck;
  std::unique_ptr<k3::Model> model;
  explicit Tiny(const std::string& variant = "k3", int seed = 1) {
    ck = k3::Checkpoint::open(k3test::tiny_checkpoint(variant, seed));
    // The k3::ref oracle path, whose prefill/decode/fork semantics these tests pin at 1e-6; the
    // default (Fast) path has the same checks at its own tolerance in test_fast_path.cpp.
    k3::ModelOptions o;
    o.exec.kernels = k3::ModelKernels::Reference;
    model = std::make_unique<k3::Model>(*ck, o);
  }
  int64_t V() const { return model->config().vocab_size; }
};

std::vector<int32_t> ids_of(int n, int vocab, int seed) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 131 + seed * 17 + 7) % vocab);
  return v;
}

void expect_rows_close(const float* a, const float* b, int64_t rows, int64_t V, double tol, const std::string& what) {
  for (int64_t r = 0; r < rows; ++r) EXPECT_LE(k3test::rel_l2(a + r * V, b + r * V, V), tol) << what << " row " << r;
}

TEST(Model, PrefillThenDecodeEqualsOnePrefill) {
  Tiny m;
  const int T = 12, k = 5;
  const auto ids = ids_of(T + k, static_cast<int>(m.V()), 1);
  auto full_seq = m.model->new_sequence();
  const auto full = m.model->forward(full_seq, ids, true);
  auto seq = m.model->new_sequence();
  auto pre = m.model->forward(seq, std::span(ids).first(T), true);
  expect_rows_close(pre.data(), full.data(), T, m.V(), 1e-6, "prefill");
  for (int i = 0; i < k; ++i) {
    auto l = m.model->forward(seq, std::span(ids).subspan(T + i, 1), false);  // decode step
    expect_rows_close(l.data(), full.data() + (T + i) * m.V(), 1, m.V(), 1e-6, "decode step");
  }
  EXPECT_EQ(seq.n_past(), T + k);
  EXPECT_EQ(full_seq.n_past(), T + k);
}

TEST(Model, SaveRestoreAndForkContinueIdentically) {
  Tiny m;
  const int P = 7, T = 12;
  const auto ids = ids_of(T, static_cast<int>(m.V()), 2);
  auto seq = m.model->new_sequence();
  m.model->forward(seq, std::span(ids).first(P), false);
  const fs::path file = fs::path(K3_BINARY_DIR) / ("seqstate-" + std::to_string(::getpid()) + ".bin");
  seq.save(file);
  k3::SequenceState fork = seq;  // copy = fork at position P
  auto a = m.model->forward(seq, std::span(ids).subspan(P), true);
  auto loaded = k3::SequenceState::load(file, m.model->config());
  EXPECT_EQ(loaded.n_past(), P);
  EXPECT_EQ(loaded.bytes(), fork.bytes());
  auto b = m.model->forward(loaded, std::span(ids).subspan(P), true);
  auto c = m.model->forward(fork, std::span(ids).subspan(P), true);
  EXPECT_EQ(a, b);  // bit-identical continuation
  EXPECT_EQ(a, c);
  // A state of a differently shaped model is refused, naming what differs.
  k3::ModelConfig other = m.model->config();
  other.kda_head_dim *= 2;
  EXPECT_THROW(k3::SequenceState::load(file, other), k3::Error);
  k3::ModelConfig fewer = m.model->config();
  fewer.plan.pop_back();
  fewer.num_hidden_layers -= 1;
  EXPECT_THROW(k3::SequenceState::load(file, fewer), k3::Error);
  // Truncated and garbage files are errors, not crashes.
  {
    const auto sz = fs::file_size(file);
    fs::resize_file(file, sz - 10);
    EXPECT_THROW(k3::SequenceState::load(file, m.model->config()), k3::Error);
    std::ofstream(file, std::ios::trunc) << "not a state";
    EXPECT_THROW(k3::SequenceState::load(file, m.model->config()), k3::Error);
  }
  fs::remove(file);
}

TEST(Model, SequenceFileCarriesFingerprintIdsAndChecksum) {
  Tiny m;
  const auto ids = ids_of(9, static_cast<int>(m.V()), 3);
  auto seq = m.model->new_sequence();
  m.model->forward(seq, ids, false);
  const fs::path file = fs::path(K3_BINARY_DIR) / ("seqmeta-" + std::to_string(::getpid()) + ".bin");
  k3::SequenceFileMeta meta{"00112233aabbccdd", ids, R"({"messages":[{"role":"user","content":"hi"}]})"};
  seq.save(file, meta);
  k3::SequenceFileMeta back;
  auto loaded = k3::SequenceState::load(file, m.model->config(), &back, "00112233aabbccdd");
  EXPECT_EQ(back.fingerprint, meta.fingerprint);
  EXPECT_EQ(back.ids, ids);
  EXPECT_EQ(back.extra_json, meta.extra_json);
  EXPECT_EQ(loaded.n_past(), 9);
  // Another model's fingerprint is refused with both values named.
  try {
    k3::SequenceState::load(file, m.model->config(), nullptr, "ffffffffffffffff");
    FAIL() << "foreign state accepted";
  } catch (const k3::Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("00112233aabbccdd"), std::string::npos) << w;
    EXPECT_NE(w.find("ffffffffffffffff"), std::string::npos) << w;
    EXPECT_NE(w.find(file.string()), std::string::npos) << w;
  }
  // One flipped payload bit: CRC-32 mismatch.
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-20, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    f.seekp(-20, std::ios::end);
    c = static_cast<char>(c ^ 1);
    f.write(&c, 1);
  }
  try {
    k3::SequenceState::load(file, m.model->config());
    FAIL() << "corrupt state accepted";
  } catch (const k3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("CRC-32"), std::string::npos) << e.what();
  }
  // ids that do not match the state are refused at save.
  EXPECT_THROW(seq.save(file, k3::SequenceFileMeta{"x", {1, 2}, ""}), k3::Error);
  fs::remove(file);
}

TEST(Model, IndependentSequencesDoNotInteract) {
  Tiny m;
  const auto a_ids = ids_of(10, static_cast<int>(m.V()), 3), b_ids = ids_of(10, static_cast<int>(m.V()), 4);
  auto sa = m.model->new_sequence();
  auto ra = m.model->forward(sa, a_ids, true);
  // Interleave two sequences token by token in one process.
  auto s1 = m.model->new_sequence(), s2 = m.model->new_sequence();
  std::vector<float> l1, l2;
  for (int i = 0; i < 10; ++i) {
    auto x = m.model->forward(s1, std::span(a_ids).subspan(i, 1), false);
    auto y = m.model->forward(s2, std::span(b_ids).subspan(i, 1), false);
    l1.insert(l1.end(), x.begin(), x.end());
    l2.insert(l2.end(), y.begin(), y.end());
  }
  expect_rows_close(l1.data(), ra.data(), 10, m.V(), 1e-6, "interleaved a");
  auto sb = m.model->new_sequence();
  auto rb = m.model->forward(sb, b_ids, true);
  expect_rows_close(l2.data(), rb.data(), 10, m.V(), 1e-6, "interleaved b");
}

TEST(Model, StateBytesCountKdaStateConvAndGrowingMlaCache) {
  Tiny m;
  const auto& c = m.model->config();
  int n_kda = 0, n_mla = 0;
  for (const auto& s : c.plan) (s.attn == k3::AttnKind::KDA ? n_kda : n_mla)++;
  ASSERT_GT(n_kda, 0);
  ASSERT_GT(n_mla, 0);
  const uint64_t kda = static_cast<uint64_t>(c.kda_num_heads) * c.kda_head_dim * c.kda_head_dim +
                       3ull * (c.short_conv_kernel_size - 1) * c.kda_num_heads * c.kda_head_dim;
  const uint64_t row = static_cast<uint64_t>(c.kv_lora_rank + c.qk_rope_head_dim);
  auto seq = m.model->new_sequence();
  EXPECT_EQ(seq.bytes(), n_kda * kda * 4);
  const auto ids = ids_of(9, static_cast<int>(m.V()), 5);
  m.model->forward(seq, ids, false);
  EXPECT_EQ(seq.bytes(), (n_kda * kda + n_mla * 9 * row) * 4);
}

TEST(Model, RejectsBadInput) {
  Tiny m;
  auto seq = m.model->new_sequence();
  std::vector<int32_t> bad = {1, static_cast<int32_t>(m.V())};
  EXPECT_THROW(m.model->forward(seq, bad, true), k3::Error);
  std::vector<int32_t> neg = {-1};
  EXPECT_THROW(m.model->forward(seq, neg, true), k3::Error);
  EXPECT_THROW(m.model->forward(seq, std::span<const int32_t>(), true), k3::Error);
  EXPECT_EQ(seq.n_past(), 0);  // unchanged after refused input
  k3::SequenceState empty;     // not laid out for this model
  std::vector<int32_t> ok = {1};
  EXPECT_THROW(m.model->forward(empty, ok, true), k3::Error);
  // A state marked inconsistent by a failed pass (e.g. a corrupt expert scale) is refused.
  seq.mark_failed();
  EXPECT_THROW(m.model->forward(seq, ok, true), k3::Error);
  EXPECT_THROW(seq.save(fs::path(K3_BINARY_DIR) / "never-written.bin"), k3::Error);
}

TEST(Model, DumpWritesSharedFormatInExecutionOrder) {
  Tiny m;
  const auto& c = m.model->config();
  const fs::path dir = fs::path(K3_BINARY_DIR) / ("dump-test-" + std::to_string(::getpid()));
  const auto ids = ids_of(3, static_cast<int>(m.V()), 6);
  {
    k3::DumpSink sink(dir);
    auto seq = m.model->new_sequence();
    m.model->forward(seq, ids, true, &sink);
    sink.finish();
  }
  std::ifstream f(dir / "manifest.json");
  const auto j = nlohmann::json::parse(f);
  std::vector<std::string> want = {"tok.embed"};
  for (int il = 0; il < c.num_hidden_layers; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    if (il > 0) want.push_back(p + "attn_mix_w");
    for (const char* n : {"attn_in", "attn_out", "ffn_mix_w", "ffn_in"}) want.push_back(p + n);
    if (c.plan[il].ffn == k3::FfnKind::LatentMoE) {
      want.push_back(p + "router_topk_ids");
      want.push_back(p + "router_topk_w");
    }
    want.push_back(p + "ffn_out");
  }
  for (const char* n : {"out.mix_w", "out.final", "logits"}) want.push_back(n);
  EXPECT_EQ(j.at("tensors").get<std::vector<std::string>>(), want);
  for (const auto& n : want) EXPECT_TRUE(fs::exists(dir / (n + ".npy"))) << n;
  // npy header of the int32 router ids.
  std::ifstream npy(dir / "blk.1.router_topk_ids.npy", std::ios::binary);
  std::string head(128, '\0');
  npy.read(head.data(), 128);
  EXPECT_NE(head.find("'descr': '<i4'"), std::string::npos);
  EXPECT_NE(head.find("'shape': (3, " + std::to_string(c.num_experts_per_token) + ")"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
