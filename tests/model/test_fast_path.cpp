// Fast forward path (ModelKernels::Fast: dispatched kernels, chunked KDA, grouped MXFP4 experts)
// against the k3::ref oracle path on every gen_tiny variant, and chunked prefill against
// token-by-token prefill — on the tiny checkpoints always and on models/k3-mini when present.
// Runs under the process default ISA (the best; ctest also runs these with --k3-isa=scalar,
// tests/test_main.cpp and tests/CMakeLists).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "io/checkpoint.h"
#include "kernels/dispatch.h"
#include "kernels/threads.h"
#include "model/k3_model.h"
#include "model/latent_moe.h"
#include "model/sequence_state.h"
#include "model/weights.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
const char* kVariants[] = {"k3", "scaled", "many_experts", "kimi_linear_gate"};

k3::ModelOptions opts(k3::ModelKernels k, k3::Mxfp4Path p, int64_t chunk = 256) {
  k3::ModelOptions o;
  o.exec.kernels = k;
  o.exec.mxfp4 = p;
  o.prefill_chunk = chunk;
  return o;
}
const k3::ModelOptions kRef = opts(k3::ModelKernels::Reference, k3::Mxfp4Path::ExactF32);
const k3::ModelOptions kExact = opts(k3::ModelKernels::Fast, k3::Mxfp4Path::ExactF32);
const k3::ModelOptions kInt8 = opts(k3::ModelKernels::Fast, k3::Mxfp4Path::Int8);

std::vector<int32_t> ids_of(int n, int64_t vocab, int seed) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 131 + seed * 17 + 7) % vocab);
  return v;
}

int32_t argmax(const float* l, int64_t V) { return static_cast<int32_t>(std::max_element(l, l + V) - l); }

/// Prefill `prompt`, then n greedy decode steps; returns the generated ids.
std::vector<int32_t> greedy(const k3::Model& m, std::span<const int32_t> prompt, int n) {
  const int64_t V = m.config().vocab_size;
  auto seq = m.new_sequence();
  auto l = m.forward(seq, prompt, false);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(argmax(l.data(), V));
    if (i + 1 < n) l = m.forward(seq, std::span(out).last(1), false);
  }
  return out;
}

/// Max over rows of the per-row relative L2 of a vs b (both [rows, V]).
double max_row_rel(const std::vector<float>& a, const std::vector<float>& b, int64_t V) {
  EXPECT_EQ(a.size(), b.size());
  double mx = 0;
  for (size_t r = 0; r * V < std::min(a.size(), b.size()); ++r)
    mx = std::max(mx, k3test::rel_l2(a.data() + r * V, b.data() + r * V, V));
  return mx;
}

/// Sets the kernel thread count for one scope (restores the previous count).
struct ScopedThreads {
  int saved = k3::num_threads();
  explicit ScopedThreads(int n) { k3::set_num_threads(n); }
  ~ScopedThreads() { k3::set_num_threads(saved); }
};

fs::path mini_dir() { return fs::path(K3_SOURCE_DIR) / "models" / "k3-mini"; }

std::vector<fs::path> chunk_test_models() {
  std::vector<fs::path> dirs;
  for (const char* v : kVariants) dirs.push_back(k3test::tiny_checkpoint(v, 5));
  const fs::path mini = mini_dir();
  if (fs::exists(mini / "config.json")) dirs.push_back(mini);
  else std::printf("[chunked prefill] models/k3-mini absent: covering the 4 tiny checkpoints only\n");
  return dirs;
}

// Both exact paths agree to 1e-5 per position; greedy continuations identical. One kernel thread
// (ThreadCountDoesNotChangeResults covers threads; per-op fork/join on a loaded 2-core box costs
// more than these tiny models' arithmetic). The int8 path is reported here and bounded
// in Int8ExpertPathWithinBound (on random tiny models its ~1e-2 per-MoE-layer error flips
// near-tied router choices, so whole-model logits differ O(1) — measured 0.6..1.1).
TEST(FastPath, MatchesReferenceOnEveryVariant) {
  ScopedThreads one_thread(1);
  std::printf("[fast path] ISA %s\n", k3::isa_name(k3::active_isa()));
  for (const char* variant : kVariants) {
    SCOPED_TRACE(variant);
    auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint(variant, 1));
    const k3::Model ref(*ck, kRef), fast(*ck, kExact), q8(*ck, kInt8);
    const int64_t V = ref.config().vocab_size;
    const auto ids = ids_of(48, V, 3);
    auto s0 = ref.new_sequence(), s1 = fast.new_sequence(), s2 = q8.new_sequence();
    const auto lr = ref.forward(s0, ids, true);
    const auto lf = fast.forward(s1, ids, true);
    const auto lq = q8.forward(s2, ids, true);
    const double e_exact = max_row_rel(lf, lr, V), e_int8 = max_row_rel(lq, lr, V);
    std::printf("[fast path] %-16s max per-position rel L2 vs ref: exact %.2e, int8 %.2e\n", variant, e_exact, e_int8);
    EXPECT_LE(e_exact, 1e-5);
    EXPECT_TRUE(std::isfinite(e_int8));
    // Greedy 32-token continuations: identical (exact path).
    const auto prompt = std::span(ids).first(16);
    EXPECT_EQ(greedy(fast, prompt, 32), greedy(ref, prompt, 32));
  }
}

// Chunked prefill (pieces of 8, 32, 512) == token-by-token prefill (pieces of 1). One kernel
// thread: this checks chunking semantics; 350+ tiny forwards with per-op thread fork/join cost
// ~60 s on a loaded 2-core box, ~2 s single-threaded.
TEST(FastPath, ChunkedPrefillEqualsTokenByToken) {
  ScopedThreads one_thread(1);
  for (const fs::path& dir : chunk_test_models()) {
    SCOPED_TRACE(dir.string());
    auto ck = k3::Checkpoint::open(dir);
    const k3::Model one(*ck, opts(k3::ModelKernels::Fast, k3::Mxfp4Path::ExactF32, 1));
    const int64_t V = one.config().vocab_size;
    const int T = 70;  // crosses the KDA chunk (64) and every piece size below
    // ids seed 6: no router near-tie on the seed-5 tiny checkpoints under scalar and avx2 (with
    // seed 4 a near-tie at one position of tiny k3 flips under rounding: 0.19 there, <1e-5 elsewhere).
    const auto ids = ids_of(T, V, 6);
    auto s1 = one.new_sequence();
    const auto l1 = one.forward(s1, ids, true);
    const auto g1 = greedy(one, ids, 8);
    for (int64_t chunk : {8, 32, 512}) {
      SCOPED_TRACE(chunk);
      const k3::Model m(*ck, opts(k3::ModelKernels::Fast, k3::Mxfp4Path::ExactF32, chunk));
      auto s = m.new_sequence();
      const auto l = m.forward(s, ids, true);
      const double e = max_row_rel(l, l1, V);
      std::printf("[chunked prefill] %s chunk %3lld vs chunk 1: max rel L2 %.2e\n", dir.filename().c_str(),
                  static_cast<long long>(chunk), e);
      EXPECT_LE(e, 1e-5);
      EXPECT_EQ(s.n_past(), T);
      EXPECT_EQ(greedy(m, ids, 8), g1);
      // Last-row-only logits equal the last row of the all-logits call.
      auto s_last = m.new_sequence();
      const auto last = m.forward(s_last, ids, false);
      ASSERT_EQ(last.size(), static_cast<size_t>(V));
      EXPECT_EQ(last, std::vector<float>(l.end() - V, l.end()));
    }
  }
}

// The int8 MXFP4 path: (a) one LatentMoE layer with its input fixed, fast int8 vs the ref oracle:
// same routing, rel L2 <= 2e-2 (measured ~1e-2 on the tiny 'k3' checkpoint: int8 activation
// rounding, kernels/ops.h); (b) on models/k3-mini when present (a trained model, no near-ties):
// whole-model logits rel L2 <= 5e-2 per position (measured 2.6e-2) and greedy argmax identical
// on >= 62 of 64 positions (measured 64/64).
// A NaN scale byte (0xFF) in a routed expert: both paths name the expert's tensors as the
// checkpoint stores them (prefix and layer from the bind, names from the tensor table).
TEST(FastPath, ExpertScaleErrorsNameTheCheckpointTensor) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("k3", 1));
  const k3::ModelWeights w = k3::bind_weights(*ck);
  const k3::ModelConfig& cfg = ck->config();
  const k3::MoeDims dm = k3::MoeDims::from(cfg);
  const k3::GluActivation act = k3::GluActivation::from(cfg);
  std::mt19937 rng(3);
  int n_layers = 0;
  for (size_t il = 0; il < w.layers.size(); ++il) {
    if (w.layers[il].spec.ffn != k3::FfnKind::LatentMoE) continue;
    ++n_layers;
    k3::MoeWeights moe = w.layers[il].moe;
    std::vector<uint8_t> nan_scales(static_cast<size_t>(moe.experts[0].w1.rows * moe.experts[0].w1.cols / 32), 0xFF);
    for (k3::ExpertWeights& e : moe.experts) e.w1.scale = nan_scales.data();
    const auto x = k3test::randn(static_cast<size_t>(dm.D), rng);
    std::vector<float> y(static_cast<size_t>(dm.D));
    const std::string layer = "language_model.model.layers." + std::to_string(il) + ".block_sparse_moe.experts.";
    for (bool fast : {false, true}) {
      try {
        k3::latent_moe_forward(moe, dm, act, x.data(), 1, y.data(), nullptr, nullptr,
                               k3::ExecOptions{fast, k3::Mxfp4Path::Int8});
        ADD_FAILURE() << "no error for scale 0xFF";
      } catch (const k3::Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(layer), std::string::npos) << msg;
        EXPECT_NE(msg.find(fast ? " w1'" : ".w1.weight_scale"), std::string::npos) << msg;
        EXPECT_NE(msg.find("0xFF"), std::string::npos) << msg;
      }
    }
  }
  EXPECT_GT(n_layers, 0);
}

TEST(FastPath, Int8ExpertPathWithinBound) {
  ScopedThreads one_thread(1);  // see ChunkedPrefillEqualsTokenByToken
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("k3", 1));
  const k3::ModelWeights w = k3::bind_weights(*ck);
  const k3::ModelConfig& cfg = ck->config();
  const k3::MoeDims dm = k3::MoeDims::from(cfg);
  const k3::GluActivation act = k3::GluActivation::from(cfg);
  std::mt19937 rng(9);
  const int64_t T = 24;
  int n_layers = 0;
  for (const k3::LayerWeights& L : w.layers) {
    if (L.spec.ffn != k3::FfnKind::LatentMoE) continue;
    ++n_layers;
    auto x = k3test::randn(static_cast<size_t>(T * dm.D), rng);  // RMS 1, like a normalized input
    std::vector<float> yr(T * dm.D), yq(T * dm.D);
    std::vector<int32_t> ir(T * dm.k), iq(T * dm.k);
    std::vector<float> wr(T * dm.k), wq(T * dm.k);
    k3::latent_moe_forward(L.moe, dm, act, x.data(), T, yr.data(), ir.data(), wr.data());
    k3::ExecOptions ex{true, k3::Mxfp4Path::Int8};
    k3::latent_moe_forward(L.moe, dm, act, x.data(), T, yq.data(), iq.data(), wq.data(), ex);
    const double e = k3test::rel_l2(yq.data(), yr.data(), yr.size());
    std::printf("[int8] MoE layer %d: rel L2 vs ref %.2e\n", n_layers, e);
    EXPECT_EQ(iq, ir);
    EXPECT_LE(e, 2e-2);
    k3::ExecOptions exact{true, k3::Mxfp4Path::ExactF32};
    k3::latent_moe_forward(L.moe, dm, act, x.data(), T, yq.data(), iq.data(), wq.data(), exact);
    EXPECT_LE(k3test::rel_l2(yq.data(), yr.data(), yr.size()), 1e-5);
  }
  EXPECT_GT(n_layers, 0);
  if (!fs::exists(mini_dir() / "config.json")) {
    std::printf("[int8] models/k3-mini absent: whole-model int8 bound checked on no trained model\n");
    return;
  }
  auto mck = k3::Checkpoint::open(mini_dir());
  const k3::Model ref(*mck, kRef), q8(*mck, kInt8);
  const int64_t V = ref.config().vocab_size;
  const auto ids = ids_of(64, V, 8);
  auto s0 = ref.new_sequence(), s1 = q8.new_sequence();
  const auto lr = ref.forward(s0, ids, true), lq = q8.forward(s1, ids, true);
  int agree = 0;
  for (int r = 0; r < 64; ++r) agree += argmax(&lr[r * V], V) == argmax(&lq[r * V], V);
  const double e = max_row_rel(lq, lr, V);
  std::printf("[int8] k3-mini: max per-position rel L2 vs ref %.2e, argmax agree %d/64\n", e, agree);
  EXPECT_LE(e, 5e-2);
  EXPECT_GE(agree, 62);
}

TEST(FastPath, PrefillThenDecodeEqualsOnePrefill) {
  ScopedThreads one_thread(1);  // see ChunkedPrefillEqualsTokenByToken
  for (const auto& o : {kExact, kInt8}) {
    auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("k3", 1));
    const k3::Model m(*ck, o);
    const int64_t V = m.config().vocab_size;
    const int T = 20, k = 6;
    const auto ids = ids_of(T + k, V, 6);
    auto sf = m.new_sequence();
    const auto full = m.forward(sf, ids, true);
    auto seq = m.new_sequence();
    m.forward(seq, std::span(ids).first(T), false);
    for (int i = 0; i < k; ++i) {
      const auto l = m.forward(seq, std::span(ids).subspan(T + i, 1), false);
      EXPECT_LE(k3test::rel_l2(l.data(), full.data() + (T + i) * V, V), 1e-5) << "step " << i;
    }
  }
}

TEST(FastPath, SaveRestoreContinuesBitIdentically) {
  ScopedThreads one_thread(1);  // see ChunkedPrefillEqualsTokenByToken
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("k3", 1));
  const k3::Model m(*ck, kInt8);
  const auto ids = ids_of(40, m.config().vocab_size, 7);
  auto seq = m.new_sequence();
  m.forward(seq, std::span(ids).first(25), false);
  const fs::path file = fs::path(K3_BINARY_DIR) / ("fast-seqstate-" + std::to_string(::getpid()) + ".bin");
  seq.save(file);
  auto loaded = k3::SequenceState::load(file, m.config());
  fs::remove(file);
  const auto a = m.forward(seq, std::span(ids).subspan(25), true);
  const auto b = m.forward(loaded, std::span(ids).subspan(25), true);
  EXPECT_EQ(a, b);
  // Decode steps from both states stay bit-identical too.
  const int32_t next = ids[3];
  EXPECT_EQ(m.forward(seq, std::span(&next, 1), false), m.forward(loaded, std::span(&next, 1), false));
}

// Kernels split rows / heads across threads without changing any output's arithmetic: the fast
// path gives bit-identical logits with 1 and with 2 threads (prefill and decode).
TEST(FastPath, ThreadCountDoesNotChangeResults) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("many_experts", 1));
  const k3::Model m(*ck, kInt8);
  // Kept small: on a loaded 2-core box every parallel region can wait a scheduler slice.
  const auto ids = ids_of(9, m.config().vocab_size, 9);
  std::vector<float> out[2];
  for (int nt : {1, 2}) {
    ScopedThreads threads(nt);
    auto seq = m.new_sequence();
    out[nt - 1] = m.forward(seq, std::span(ids).first(8), true);
    for (int i = 8; i < 9; ++i) {
      const auto l = m.forward(seq, std::span(ids).subspan(i, 1), false);
      out[nt - 1].insert(out[nt - 1].end(), l.begin(), l.end());
    }
  }
  EXPECT_EQ(out[0], out[1]);
}

TEST(FastPath, RejectsBadOptions) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("k3", 1));
  EXPECT_THROW((void)k3::Model(*ck, opts(k3::ModelKernels::Fast, k3::Mxfp4Path::Int8, 0)), k3::Error);
  const k3::Model m(*ck);  // defaults: the process exec config (Fast), chunk 256, mxfp4 resolved
  EXPECT_EQ(m.options().exec.kernels, k3::default_exec_config().kernels.value_or(k3::ModelKernels::Fast));
  EXPECT_EQ(m.options().prefill_chunk, 256);
  EXPECT_TRUE(m.options().exec.mxfp4.has_value());
}

}  // namespace
