// Routed experts streamed from the shards (io/expert_store.h, issue 13): the logits are
// bit-identical to the all-in-RAM (mapped) model, with a cache smaller than the experts, with no
// cache, on the fast and the oracle path; the layout is one read per expert; a shard truncated
// while streaming is a clear error naming the file.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>
#include <chrono>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/expert_store.h"
#include "model/k3_model.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

std::vector<int32_t> ids_of(int n, int64_t V, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& x : ids) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
  return ids;
}

/// Prefill `prompt` (all logits) then `steps` greedy decode steps; every logits row concatenated.
std::vector<float> run_model(const k3::Model& m, const std::vector<int32_t>& prompt, int steps) {
  auto s = m.new_sequence();
  std::vector<float> all = m.forward(s, prompt, true);
  const int64_t V = m.config().vocab_size;
  for (int i = 0; i < steps; ++i) {
    const float* last = all.data() + all.size() - static_cast<size_t>(V);
    int32_t best = 0;
    for (int64_t v = 1; v < V; ++v)
      if (last[v] > last[best]) best = static_cast<int32_t>(v);
    const int32_t tok[1] = {best};
    const auto row = m.forward(s, tok, false);
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

k3::ModelOptions opts(k3::ModelKernels kernels, std::shared_ptr<k3::ExpertStore> store, int64_t chunk = 256) {
  k3::ModelOptions o;
  o.exec.kernels = kernels;
  o.exec.mxfp4 = k3::Mxfp4Path::ExactF32;
  o.prefill_chunk = chunk;
  o.expert_store = std::move(store);
  return o;
}

}  // namespace

TEST(ExpertStream, LayoutIsOneReadPerExpert) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("k3", 1));
  k3::ExpertStore store(*ck, {});
  const auto lay = store.layout();
  int n_moe = 0;
  for (const auto& s : ck->config().plan) n_moe += s.ffn == k3::FfnKind::LatentMoE;
  EXPECT_EQ(lay.experts, int64_t{n_moe} * ck->config().num_experts);
  EXPECT_EQ(lay.runs, lay.experts);  // the six tensors of an expert are adjacent in its shard
  // Each expert: w1, w3 [Im, L] and w2 [L, Im] as packed nibbles + one E8M0 scale per 32.
  const auto& c = ck->config();
  const uint64_t per_matrix = static_cast<uint64_t>(c.moe_intermediate_size) * c.routed_expert_hidden_size;
  EXPECT_EQ(store.expert_bytes(1, 0), 3 * (per_matrix / 2 + per_matrix / 32));
  EXPECT_EQ(store.total_expert_bytes(), static_cast<uint64_t>(lay.experts) * store.expert_bytes(1, 0));
  EXPECT_THROW(store.acquire(0, std::vector<int64_t>{0}), k3::Error);  // layer 0 is dense
  EXPECT_THROW(store.acquire(1, std::vector<int64_t>{c.num_experts}), k3::Error);
  EXPECT_THROW(store.acquire(1, std::vector<int64_t>{3, 3}), k3::Error);
  EXPECT_THROW(k3::ExpertStore bad(*ck, {.cache_bytes = 0, .io_threads = 0}), k3::Error);
}

// Fast path, prefill (several experts per chunk, experts in parallel) + decode: streamed with a
// cache of a quarter of the experts (evictions happen), with no cache, and buffered I/O — every
// logit identical to the mapped model's, bit for bit. Reads on demand only (prefetch off), so
// every read is an acquire's; PrefetchBitIdenticalOnAndOff covers prefetch.
TEST(ExpertStream, FastPathBitIdenticalToMapped) {
  for (const char* variant : {"k3", "many_experts"}) {
    SCOPED_TRACE(variant);
    auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint(variant, 1));
    const int64_t V = ck->config().vocab_size;
    const auto prompt = ids_of(40, V, 3);
    const k3::Model mapped(*ck, opts(k3::ModelKernels::Fast, nullptr, 16));
    const auto want = run_model(mapped, prompt, 6);
    k3::ExpertStore probe(*ck, {});
    const uint64_t total = probe.total_expert_bytes();
    struct Case {
      uint64_t budget;
      bool direct;
    };
    for (const Case cs : {Case{total / 4, true}, Case{0, true}, Case{total / 4, false}}) {
      SCOPED_TRACE(cs.budget);
      auto store = std::make_shared<k3::ExpertStore>(
          *ck, k3::ExpertStoreOptions{.cache_bytes = cs.budget, .io_threads = 3, .direct = cs.direct, .prefetch = false});
      const k3::Model streamed(*ck, opts(k3::ModelKernels::Fast, store, 16));
      const auto got = run_model(streamed, prompt, 6);
      EXPECT_TRUE(bit_equal(got, want));
      const auto st = store->stats();
      EXPECT_GT(st.misses, 0u);
      EXPECT_GT(st.bytes_read, 0u);
      EXPECT_GE(st.reads, st.misses);
      if (cs.budget == 0) {
        EXPECT_EQ(st.hits, 0u);
        EXPECT_EQ(st.resident_bytes, 0u);  // nothing kept once the calls end
      } else {
        EXPECT_GT(st.evictions, 0u);
        EXPECT_LE(st.resident_bytes, cs.budget);
      }
      if (!cs.direct) {
        EXPECT_EQ(store->io_mode(), "buffered");
      }
      std::printf("[expert stream] %s budget %llu of %llu B: hits %llu misses %llu evictions %llu read %llu B (%s)\n",
                  variant, static_cast<unsigned long long>(cs.budget), static_cast<unsigned long long>(total),
                  static_cast<unsigned long long>(st.hits), static_cast<unsigned long long>(st.misses),
                  static_cast<unsigned long long>(st.evictions), static_cast<unsigned long long>(st.bytes_read),
                  store->io_mode().c_str());
    }
    // A budget that holds every expert: the second run reads nothing.
    auto store = std::make_shared<k3::ExpertStore>(
        *ck, k3::ExpertStoreOptions{.cache_bytes = 2 * total + (1u << 24), .prefetch = false});
    const k3::Model streamed(*ck, opts(k3::ModelKernels::Fast, store, 16));
    EXPECT_TRUE(bit_equal(run_model(streamed, prompt, 6), want));
    store->reset_stats();
    EXPECT_TRUE(bit_equal(run_model(streamed, prompt, 6), want));
    EXPECT_EQ(store->stats().misses, 0u);
    EXPECT_EQ(store->stats().bytes_read, 0u);
  }
}

// The k3::ref oracle path streams per token and is bit-identical too.
TEST(ExpertStream, ReferencePathBitIdenticalToMapped) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("k3", 1));
  const auto prompt = ids_of(6, ck->config().vocab_size, 4);
  const k3::Model mapped(*ck, opts(k3::ModelKernels::Reference, nullptr));
  auto store = std::make_shared<k3::ExpertStore>(*ck, k3::ExpertStoreOptions{.cache_bytes = 0, .io_threads = 2});
  const k3::Model streamed(*ck, opts(k3::ModelKernels::Reference, store));
  EXPECT_TRUE(bit_equal(run_model(streamed, prompt, 2), run_model(mapped, prompt, 2)));
}

// A shard truncated after the store opened it: the read of an expert past the new end fails with
// an error naming the shard and the expert; experts still inside the file keep working.
TEST(ExpertStream, TruncatedShardIsAClearError) {
  const fs::path src = k3test::tiny_checkpoint("k3", 1);
  char tmpl[] = "/tmp/k3_expert_stream_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path dir = tmpl;
  for (const auto& f : fs::directory_iterator(src)) fs::copy_file(f.path(), dir / f.path().filename());
  {
    k3::CheckpointOptions co;
    co.map_data = false;  // nothing mapped: a truncated mapping would be SIGBUS, not an error
    auto ck = k3::Checkpoint::open(dir, co);
    const int64_t E = ck->config().num_experts;
    // The shard of the last expert of layer 1, cut to half its size.
    const k3::TensorView& t =
        ck->get("model.layers.1.block_sparse_moe.experts." + std::to_string(E - 1) + ".w3.weight_scale");
    k3::ExpertStore store(*ck, {.cache_bytes = 0, .io_threads = 2});
    const fs::path shard = dir / t.file;
    fs::resize_file(shard, 64);
    std::vector<int64_t> ids{E - 1};
    auto lease = store.acquire(1, ids);
    try {
      lease.wait(0);
      ADD_FAILURE() << "expected a k3::Error";
    } catch (const k3::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(shard.string()), std::string::npos) << msg;
      EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
      EXPECT_NE(msg.find("expert " + std::to_string(E - 1) + " of layer 1"), std::string::npos) << msg;
    }
    lease = k3::ExpertStore::Lease();
    // The failed read is not cached: a second acquire reads again (and fails again).
    auto again = store.acquire(1, ids);
    EXPECT_THROW(again.wait(0), k3::Error);
    EXPECT_EQ(store.stats().misses, 2u);
  }
  fs::remove_all(dir);
}

// Next-layer prefetch: the model predicts each MoE layer's experts from the previous layer's FFN
// input and reads them ahead. The logits are bit-identical with prefetch on and off (and to the
// mapped model), on the fast path (prefill + decode, a cache and none) and the oracle path; the
// prediction counters add up.
TEST(ExpertStream, PrefetchBitIdenticalOnAndOff) {
  for (const char* variant : {"k3", "many_experts"}) {
    SCOPED_TRACE(variant);
    auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint(variant, 1));
    const auto prompt = ids_of(24, ck->config().vocab_size, 5);
    const k3::Model mapped(*ck, opts(k3::ModelKernels::Fast, nullptr, 8));
    const auto want = run_model(mapped, prompt, 8);
    k3::ExpertStore probe(*ck, {});
    const uint64_t total = probe.total_expert_bytes();
    int n_moe = 0;
    for (const auto& s : ck->config().plan) n_moe += s.ffn == k3::FfnKind::LatentMoE;
    for (const uint64_t budget : {uint64_t{0}, total / 4}) {
      for (const bool prefetch : {true, false}) {
        SCOPED_TRACE(std::to_string(budget) + (prefetch ? " prefetch on" : " prefetch off"));
        auto store = std::make_shared<k3::ExpertStore>(
            *ck, k3::ExpertStoreOptions{.cache_bytes = budget, .io_threads = 3, .prefetch = prefetch});
        const k3::Model streamed(*ck, opts(k3::ModelKernels::Fast, store, 8));
        EXPECT_TRUE(bit_equal(run_model(streamed, prompt, 8), want));
        // A mispredicted read may still be in flight when the run returns (its release only
        // unpins it; the I/O thread counts and frees it when the read ends): wait for the counters
        // to settle, up to 10 s.
        auto settled = [](const auto& s) {
          return s.prefetch_used + s.prefetch_wasted + s.prefetch_cancelled == s.prefetched && s.resident_bytes == 0;
        };
        for (int i = 0; i < 10000 && prefetch && budget == 0 && !settled(store->stats()); ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        const auto st = store->stats();
        if (!prefetch) {
          EXPECT_EQ(st.prefetched, 0u);
          EXPECT_EQ(st.predicted, 0u);
          continue;
        }
        // Every MoE layer has a prediction from the layer before it (layer 0 is dense); a prefill
        // chunk with more distinct experts than one acquire group acquires the rest unpredicted.
        EXPECT_GT(st.prefetched, 0u);
        EXPECT_GT(st.predicted, 0u);
        EXPECT_LE(st.predicted, st.hits + st.misses);
        EXPECT_LE(st.predicted_right, st.predicted);
        EXPECT_LE(st.prefetch_used + st.prefetch_wasted + st.prefetch_cancelled, st.prefetched);
        EXPECT_LE(st.prefetch_used, st.hits);
        if (budget == 0) {
          // Every prefetched expert ended used, wasted or cancelled; nothing stays resident; every
          // hit is on an expert a prefetch read.
          EXPECT_EQ(st.prefetch_used + st.prefetch_wasted + st.prefetch_cancelled, st.prefetched);
          EXPECT_EQ(st.resident_bytes, 0u);
          EXPECT_EQ(st.hits, st.prefetch_used);
        }
        EXPECT_EQ(st.prefetch_wasted_bytes == 0, st.prefetch_wasted == 0);
        std::printf("[expert prefetch] %s budget %llu: prediction right %llu of %llu, prefetched %llu (used %llu, "
                    "wasted %llu, cancelled %llu), %d MoE layers\n",
                    variant, static_cast<unsigned long long>(budget), static_cast<unsigned long long>(st.predicted_right),
                    static_cast<unsigned long long>(st.predicted), static_cast<unsigned long long>(st.prefetched),
                    static_cast<unsigned long long>(st.prefetch_used),
                    static_cast<unsigned long long>(st.prefetch_wasted),
                    static_cast<unsigned long long>(st.prefetch_cancelled), n_moe);
      }
    }
    // A budget that holds every expert: the second run acquires nothing from the drive (reads,
    // if any, are prefetches of predicted experts the first run never used).
    {
      auto store = std::make_shared<k3::ExpertStore>(*ck, k3::ExpertStoreOptions{.cache_bytes = 2 * total + (1u << 24)});
      const k3::Model streamed(*ck, opts(k3::ModelKernels::Fast, store, 8));
      EXPECT_TRUE(bit_equal(run_model(streamed, prompt, 8), want));
      store->reset_stats();
      EXPECT_TRUE(bit_equal(run_model(streamed, prompt, 8), want));
      const auto st = store->stats();
      EXPECT_EQ(st.misses, 0u);
      EXPECT_LE(st.reads, st.prefetched);
    }
    // The oracle path with prefetch: identical too.
    const k3::Model mapped_ref(*ck, opts(k3::ModelKernels::Reference, nullptr));
    auto store = std::make_shared<k3::ExpertStore>(*ck, k3::ExpertStoreOptions{.cache_bytes = 0, .io_threads = 2});
    const k3::Model streamed_ref(*ck, opts(k3::ModelKernels::Reference, store));
    const std::vector<int32_t> short_prompt(prompt.begin(), prompt.begin() + 4);
    EXPECT_TRUE(bit_equal(run_model(streamed_ref, short_prompt, 2), run_model(mapped_ref, short_prompt, 2)));
    EXPECT_GT(store->stats().prefetched, 0u);
  }
}

// ExpertStore::prefetch by itself: a prediction pins its experts until the layer's acquire,
// which counts how many it named; the used ones count as prefetch_used, the unused one is wasted
// or cancelled; prefetch off reads nothing; bad ids are errors as for acquire.
TEST(ExpertStream, PrefetchCounters) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("many_experts", 1));
  const int64_t E = ck->config().num_experts;
  ASSERT_GE(E, 4);
  k3::ExpertStore store(*ck, {.cache_bytes = 0, .io_threads = 2});
  const std::vector<int64_t> predicted{0, 1, 2}, used{1, 2, 3};
  store.prefetch(1, predicted);
  EXPECT_EQ(store.stats().prefetched, 3u);
  EXPECT_GE(store.stats().resident_bytes, 3 * store.expert_bytes(1, 0));  // pinned until the acquire
  {
    auto lease = store.acquire(1, used);
    for (size_t i = 0; i < used.size(); ++i) {
      const k3::ExpertMatrices& m = lease.wait(i);
      EXPECT_EQ(m.w1.rows, ck->config().moe_intermediate_size);
    }
    const auto st = store.stats();
    EXPECT_EQ(st.predicted, 3u);
    EXPECT_EQ(st.predicted_right, 2u);
    EXPECT_EQ(st.prefetch_used, 2u);
    EXPECT_EQ(st.hits, 2u);
    EXPECT_EQ(st.misses, 1u);
  }
  // Expert 0: cancelled if its read had not begun when the acquire dropped the prediction, else
  // read and freed unused (wasted). Wait for the I/O thread to finish it.
  for (int i = 0; i < 2000; ++i) {
    const auto st = store.stats();
    if (st.prefetch_wasted + st.prefetch_cancelled == 1 && st.resident_bytes == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  auto st = store.stats();
  EXPECT_EQ(st.prefetch_wasted + st.prefetch_cancelled, 1u);
  if (st.prefetch_wasted) EXPECT_GE(st.prefetch_wasted_bytes, store.expert_bytes(1, 0));
  else EXPECT_EQ(st.prefetch_wasted_bytes, 0u);
  EXPECT_EQ(st.resident_bytes, 0u);
  // A second prediction of the same layer replaces the first; an acquire without a standing
  // prediction counts nothing as predicted.
  store.reset_stats();
  store.prefetch(1, std::vector<int64_t>{3});
  store.prefetch(1, std::vector<int64_t>{2});
  { auto lease = store.acquire(1, std::vector<int64_t>{2}); lease.wait(0); }
  { auto lease = store.acquire(1, std::vector<int64_t>{2}); lease.wait(0); }
  st = store.stats();
  EXPECT_EQ(st.predicted, 1u);
  EXPECT_EQ(st.predicted_right, 1u);
  // Bad ids: errors naming the problem, nothing pinned.
  EXPECT_THROW(store.prefetch(0, std::vector<int64_t>{0}), k3::Error);  // layer 0 is dense
  EXPECT_THROW(store.prefetch(1, std::vector<int64_t>{E}), k3::Error);
  try {
    store.prefetch(1, std::vector<int64_t>{3, 3});
    ADD_FAILURE() << "expected a k3::Error";
  } catch (const k3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("requested twice in one prefetch"), std::string::npos) << e.what();
  }
  // Prefetch off: nothing is read ahead.
  k3::ExpertStore off(*ck, {.cache_bytes = 0, .io_threads = 2, .prefetch = false});
  off.prefetch(1, predicted);
  EXPECT_EQ(off.stats().prefetched, 0u);
  EXPECT_EQ(off.stats().resident_bytes, 0u);
  { auto lease = off.acquire(1, used); lease.wait(0); }
  EXPECT_EQ(off.stats().predicted, 0u);
  EXPECT_EQ(off.stats().misses, 3u);
}
