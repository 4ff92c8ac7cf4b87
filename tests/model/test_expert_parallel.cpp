// Tensor + expert parallel (ModelOptions::comm, docs/distributed.md): KDA/MLA heads, the dense
// MLP's intermediate columns and the output projections' rows, routed experts and lm_head rows
// split over ranks run as threads of this process (thread_comm_test_util.h), each with its own
// k3::Model, against one process bit for bit — in every numerics mode and on the oracle kernels,
// with uneven splits, a rank holding no expert and ranks holding no head; batches of two
// sequences; the per-rank state; the shard bookkeeping, the fingerprint and the start-up check.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/comm.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/expert_store.h"
#include "model/k3_model.h"
#include "runtime/model_fingerprint.h"
#include "test_util.h"
#include "thread_comm_test_util.h"

namespace {

const std::vector<int32_t> kIds = {5, 77, 300, 2, 511, 64, 128, 9, 250, 33, 1, 400};

struct Mode {
  const char* name;
  k3::ModelOptions options;
};

/// Every numerics mode, the oracle kernels, a quantized trunk (lm_head rows quantized per rank)
/// and short prefill pieces (several rounds of collectives per call).
std::vector<Mode> modes() {
  std::vector<Mode> m(7);
  m[0] = {"exact", {}};
  m[0].options.exec.numerics = k3::Numerics::Exact;
  m[1] = {"int8", {}};
  m[1].options.exec.numerics = k3::Numerics::Int8;
  m[2] = {"bf16", {}};
  m[2].options.exec.numerics = k3::Numerics::Bf16;
  m[3] = {"mxfp8", {}};
  m[3].options.exec.numerics = k3::Numerics::Mxfp8;
  m[4] = {"reference", {}};
  m[4].options.exec.kernels = k3::ModelKernels::Reference;
  m[5] = {"int8, trunk q8", {}};
  m[5].options.exec.numerics = k3::Numerics::Int8;
  m[5].options.trunk_quant = k3::QuantKind::Q8;
  m[6] = {"exact, prefill_chunk 5", {}};
  m[6].options.exec.numerics = k3::Numerics::Exact;
  m[6].options.prefill_chunk = 5;
  for (Mode& x : m) x.options.exec.threads = 1;
  return m;
}

/// Prefill logits (all rows) followed by two decode steps' logits, concatenated.
std::vector<float> run_model(const k3::Model& m) {
  k3::SequenceState s = m.new_sequence();
  std::vector<float> out = m.forward(s, kIds, /*all_logits=*/true);
  int32_t next = 3;
  for (int step = 0; step < 2; ++step) {
    const int32_t one[1] = {next};
    const std::vector<float> l = m.forward(s, one, false);
    out.insert(out.end(), l.begin(), l.end());
    next = (next * 31 + 7) % 500;
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// A batch of two sequences of different lengths (prefill), then three decode steps of both in
/// one batch, then a per-token (decode-form) entry of 3 tokens; every logits row concatenated,
/// followed by both states' bytes (as floats' worth of a counter, for the comparison).
std::vector<float> run_batch(const k3::Model& m, std::vector<uint64_t>* state_bytes = nullptr) {
  k3::SequenceState a = m.new_sequence(), b = m.new_sequence();
  const std::vector<int32_t> pa(kIds.begin(), kIds.begin() + 7), pb(kIds.begin() + 3, kIds.end());
  std::vector<float> out;
  auto add = [&](const std::vector<std::vector<float>>& l) {
    for (const auto& v : l) out.insert(out.end(), v.begin(), v.end());
  };
  add(m.forward_batch(std::vector<k3::BatchEntry>{{&a, pa, k3::BatchLogits::All}, {&b, pb, k3::BatchLogits::Last}}));
  int32_t na = 11, nb = 12;
  for (int step = 0; step < 3; ++step) {
    const int32_t ia[1] = {na}, ib[1] = {nb};
    add(m.forward_batch(std::vector<k3::BatchEntry>{{&a, ia}, {&b, ib}}));
    na = (na * 31 + 7) % 500;
    nb = (nb * 17 + 3) % 500;
  }
  const int32_t three[3] = {42, 43, 44};
  k3::BatchEntry pt{&a, three, k3::BatchLogits::All};
  pt.per_token = true;
  add(m.forward_batch(std::span<const k3::BatchEntry>(&pt, 1)));
  if (state_bytes) *state_bytes = {a.bytes(), b.bytes()};
  return out;
}

}  // namespace

TEST(ExpertParallel, BitIdenticalToOneProcessAtEveryRankCount) {
  for (const char* variant : {"odd_experts", "few_experts", "k3", "odd_heads", "one_head"}) {
    auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint(variant, 1));
    for (const Mode& mode : modes()) {
      const k3::ModelOptions mo = mode.options;
      const std::vector<float> one = run_model(k3::Model(*ck, mo));
      for (int n : {2, 3, 4}) {
        SCOPED_TRACE(std::string(variant) + " " + mode.name + " ranks " + std::to_string(n));
        std::vector<std::vector<float>> got(static_cast<size_t>(n));
        k3test::run_ranks(n, [&](int r, std::shared_ptr<k3::Comm> comm) {
          k3::ModelOptions o = mo;
          o.comm = comm;
          got[static_cast<size_t>(r)] = run_model(k3::Model(*ck, o));
        });
        for (int r = 0; r < n; ++r) EXPECT_TRUE(same_bits(got[static_cast<size_t>(r)], one)) << "rank " << r;
      }
    }
  }
}

TEST(ExpertParallel, HeadSplitBatchesAreBitIdenticalAndStatesHoldTheRanksHeads) {
  for (const char* variant : {"odd_heads", "one_head"}) {
    auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint(variant, 1));
    const k3::ModelConfig& cfg = ck->config();
    for (const Mode& mode : modes()) {
      const k3::ModelOptions mo = mode.options;
      std::vector<uint64_t> one_bytes;
      const std::vector<float> one = run_batch(k3::Model(*ck, mo), &one_bytes);
      for (int n : {2, 3, 4}) {
        SCOPED_TRACE(std::string(variant) + " " + mode.name + " ranks " + std::to_string(n));
        std::vector<std::vector<float>> got(static_cast<size_t>(n));
        std::vector<std::vector<uint64_t>> bytes(static_cast<size_t>(n));
        std::vector<k3::ModelShard> sh(static_cast<size_t>(n));
        k3test::run_ranks(n, [&](int r, std::shared_ptr<k3::Comm> comm) {
          k3::ModelOptions o = mo;
          o.comm = comm;
          const k3::Model m(*ck, o);
          sh[static_cast<size_t>(r)] = m.shard();
          got[static_cast<size_t>(r)] = run_batch(m, &bytes[static_cast<size_t>(r)]);
        });
        // The KDA state of a rank is its heads' share: one process's KDA bytes split by heads,
        // the (replicated) MLA cache whole.
        const int64_t H = cfg.kda_num_heads;
        uint64_t kda_layers = 0;
        for (const k3::LayerSpec& s : cfg.plan) kda_layers += s.attn == k3::AttnKind::KDA;
        const int64_t d = cfg.kda_head_dim, K = cfg.short_conv_kernel_size;
        const uint64_t per_head = kda_layers * static_cast<uint64_t>(d * d + 3 * (K - 1) * d) * 4;
        for (int r = 0; r < n; ++r) {
          const k3::ModelShard& s = sh[static_cast<size_t>(r)];
          EXPECT_TRUE(same_bits(got[static_cast<size_t>(r)], one)) << "rank " << r;
          EXPECT_EQ(s.kda_heads.begin, k3::split_range(H, n, r).begin);
          EXPECT_EQ(s.kda_heads.size(), k3::split_range(H, n, r).size());
          EXPECT_EQ(s.mla_heads.size(), k3::split_range(cfg.num_attention_heads, n, r).size());
          for (int q = 0; q < 2; ++q)
            EXPECT_EQ(bytes[static_cast<size_t>(r)][q],
                      one_bytes[q] - static_cast<uint64_t>(H - s.kda_heads.size()) * per_head)
                << "rank " << r << " sequence " << q;
        }
      }
    }
  }
}

/// The trunk is split too: each rank reads the replicated part plus its rows of the split
/// matrices, so the trunk bytes of the ranks sum to (n - 1) replicated parts plus one process's
/// trunk; a rank's page-in ranges are its trunk share, experts and lm_head rows.
TEST(ExpertParallel, TrunkShareOfARankIsItsRowsOfTheSplitMatrices) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("odd_heads", 1));
  k3::ModelOptions mo;
  mo.exec.threads = 1;
  const k3::Model one(*ck, mo);
  const uint64_t all = one.shard().trunk_bytes;
  uint64_t one_ranges = 0;
  for (const auto& r : one.mapped_weight_ranges()) one_ranges += r.size();
  for (int n : {2, 4}) {
    std::vector<k3::ModelShard> sh(static_cast<size_t>(n));
    std::vector<uint64_t> ranges(static_cast<size_t>(n));
    k3test::run_ranks(n, [&](int r, std::shared_ptr<k3::Comm> comm) {
      k3::ModelOptions o = mo;
      o.comm = comm;
      const k3::Model m(*ck, o);
      sh[static_cast<size_t>(r)] = m.shard();
      for (const auto& x : m.mapped_weight_ranges()) ranges[static_cast<size_t>(r)] += x.size();
    });
    uint64_t sum = 0;
    for (int r = 0; r < n; ++r) {
      const k3::ModelShard& s = sh[static_cast<size_t>(r)];
      EXPECT_LT(s.trunk_bytes, all) << "rank " << r << " holds the whole trunk";
      sum += s.trunk_bytes;
      // Page-in: one process's ranges less the trunk bytes, experts and lm_head rows not held.
      EXPECT_EQ(ranges[static_cast<size_t>(r)], one_ranges - (all - s.trunk_bytes) -
                                                    (one.shard().expert_bytes - s.expert_bytes) -
                                                    (one.shard().lm_head_bytes - s.lm_head_bytes))
          << "rank " << r;
    }
    // Σ_r trunk_r = n·replicated + split, all = replicated + split.
    EXPECT_EQ((sum - all) % static_cast<uint64_t>(n - 1), 0u);
    EXPECT_GT(sum, all);
  }
}

/// --state-save / --state-load under N ranks: each rank saves its piece (Model::state_file) and a
/// restore into the same N continues bit for bit like one process; a piece refuses to load under
/// another rank count, on another rank, or in one process.
TEST(ExpertParallel, StateSaveAndRestorePerRank) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("odd_heads", 1));
  k3::ModelOptions mo;
  mo.exec.threads = 1;
  const std::filesystem::path file = std::filesystem::path(K3_BINARY_DIR) / "tp_state_test.k3state";
  const std::vector<int32_t> head(kIds.begin(), kIds.begin() + 6), more = {7, 8, 9};
  std::vector<float> one;
  {
    const k3::Model m(*ck, mo);
    k3::SequenceState s = m.new_sequence();
    m.forward(s, head, false);
    one = m.forward(s, more, true);
  }
  const int n = 4;
  std::vector<std::vector<float>> got(n);
  std::vector<std::string> names(n), wrong_rank(n), wrong_n(n);
  k3test::run_ranks(n, [&](int r, std::shared_ptr<k3::Comm> comm) {
    k3::ModelOptions o = mo;
    o.comm = comm;
    const k3::Model m(*ck, o);
    {
      k3::SequenceState s = m.new_sequence();
      m.forward(s, head, false);
      s.save(m.state_file(file));
    }
    names[static_cast<size_t>(r)] = m.state_file(file).filename().string();
    k3::SequenceState back = m.load_sequence(m.state_file(file));
    got[static_cast<size_t>(r)] = m.forward(back, more, true);
    try {  // another rank's piece
      (void)m.load_sequence(m.state_file(file).string() + (r == 0 ? ".rank1of4" : ""));
    } catch (const k3::Error& e) {
      wrong_rank[static_cast<size_t>(r)] = e.what();
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(same_bits(got[static_cast<size_t>(r)], one)) << "rank " << r;
  EXPECT_EQ(names[0], file.filename().string());
  EXPECT_EQ(names[3], file.filename().string() + ".rank3of4");
  EXPECT_NE(wrong_rank[0].find("saved by rank 1 of 4, this is rank 0 of 4"), std::string::npos) << wrong_rank[0];
  // Another rank count: 2 ranks reading the 4-rank pieces (rank 1's file name differs: absent).
  k3test::run_ranks(2, [&](int r, std::shared_ptr<k3::Comm> comm) {
    k3::ModelOptions o = mo;
    o.comm = comm;
    const k3::Model m(*ck, o);
    try {
      (void)m.load_sequence(r == 0 ? file : std::filesystem::path(file.string() + ".rank1of4"));
    } catch (const k3::Error& e) {
      wrong_n[static_cast<size_t>(r)] = e.what();
    }
  });
  EXPECT_NE(wrong_n[0].find("saved by rank 0 of 4, this is rank 0 of 2"), std::string::npos) << wrong_n[0];
  EXPECT_NE(wrong_n[1].find("saved by rank 1 of 4, this is rank 1 of 2"), std::string::npos) << wrong_n[1];
  // One process: the plain loader refuses a piece too.
  try {
    (void)k3::SequenceState::load(file, ck->config());
    ADD_FAILURE() << "a rank's piece loaded in one process";
  } catch (const k3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("saved by rank 0 of 4, this is rank 0 of 1"), std::string::npos) << e.what();
  }
  // A state of one process given to a rank's forward is refused, naming the split.
  k3test::run_ranks(2, [&](int, std::shared_ptr<k3::Comm> comm) {
    k3::ModelOptions o = mo;
    o.comm = comm;
    const k3::Model m(*ck, o);
    k3::SequenceState s = k3::Model(*ck, mo).new_sequence();
    try {
      (void)m.forward(s, more, false);
      ADD_FAILURE() << "a one-process state ran on a rank";
    } catch (const k3::Error& e) {
      EXPECT_NE(std::string(e.what()).find("holds the KDA heads of rank 0 of 1"), std::string::npos) << e.what();
    }
  });
  for (int r = 0; r < n; ++r) std::filesystem::remove(file.string() + (r ? ".rank" + std::to_string(r) + "of4" : ""));
}

TEST(ExpertParallel, SizeOneCommunicatorIsOneProcess) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("odd_experts", 1));
  k3::ModelOptions mo;
  mo.exec.threads = 1;
  const k3::Model plain(*ck, mo);
  mo.comm = std::make_shared<k3::SingleProcessComm>();
  const k3::Model one(*ck, mo);
  EXPECT_TRUE(same_bits(run_model(plain), run_model(one)));
  const k3::ModelShard& s = one.shard();
  EXPECT_EQ(s.rank, 0);
  EXPECT_EQ(s.ranks, 1);
  EXPECT_EQ(s.experts.begin, 0);
  EXPECT_EQ(s.experts.end, 6);
  EXPECT_EQ(s.vocab.end, 515);
  EXPECT_EQ(mo.comm->counters().collectives, 0u);  // one process: no collective is called
  EXPECT_EQ(k3::model_fingerprint(*ck, plain), k3::model_fingerprint(*ck, one));
  k3::check_ranks_agree(*ck, one, "build");  // nothing to compare
}

TEST(ExpertParallel, ShardsSplitExpertsAndVocabularyAndTheirBytes) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("odd_experts", 1));
  k3::ModelOptions mo;
  mo.exec.threads = 1;
  const k3::ModelShard all = k3::Model(*ck, mo).shard();
  const int n = 4;
  std::vector<k3::ModelShard> sh(n);
  k3test::run_ranks(n, [&](int r, std::shared_ptr<k3::Comm> comm) {
    k3::ModelOptions o = mo;
    o.comm = comm;
    sh[static_cast<size_t>(r)] = k3::Model(*ck, o).shard();
  });
  const int64_t expect_experts[4][2] = {{0, 2}, {2, 4}, {4, 5}, {5, 6}};  // 6 experts: 2, 2, 1, 1
  const int64_t expect_vocab[4][2] = {{0, 129}, {129, 258}, {258, 387}, {387, 515}};
  uint64_t experts = 0, head = 0;
  for (int r = 0; r < n; ++r) {
    const k3::ModelShard& s = sh[static_cast<size_t>(r)];
    EXPECT_EQ(s.rank, r);
    EXPECT_EQ(s.ranks, n);
    EXPECT_EQ(s.experts.begin, expect_experts[r][0]);
    EXPECT_EQ(s.experts.end, expect_experts[r][1]);
    EXPECT_EQ(s.vocab.begin, expect_vocab[r][0]);
    EXPECT_EQ(s.vocab.end, expect_vocab[r][1]);
    EXPECT_LT(s.trunk_bytes, all.trunk_bytes);  // the trunk is split too (heads, o_proj rows)
    experts += s.expert_bytes;
    head += s.lm_head_bytes;
  }
  EXPECT_GT(all.expert_bytes, 0u);
  EXPECT_EQ(experts, all.expert_bytes);  // every expert byte on exactly one rank
  EXPECT_EQ(head, all.lm_head_bytes);
  EXPECT_EQ(sh[2].expert_bytes * 2, sh[0].expert_bytes);  // equal experts: 1 vs 2 of them
}

/// The page-in ranges of a rank (Model::mapped_weight_ranges, `--warm`) hold its experts and
/// lm_head rows and its trunk share: one process's ranges less what the rank does not hold.
TEST(ExpertParallel, MappedRangesOfARankHoldOnlyItsExpertsAndVocabularyRows) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("odd_experts", 1));
  k3::ModelOptions mo;
  mo.exec.threads = 1;
  auto range_bytes = [](const k3::Model& m) {
    uint64_t b = 0;
    for (const auto& r : m.mapped_weight_ranges()) b += r.size();
    return b;
  };
  const k3::Model one(*ck, mo);
  const uint64_t replicated = range_bytes(one) - one.shard().expert_bytes - one.shard().lm_head_bytes;
  const int n = 4;
  std::vector<uint64_t> bytes(n), own(n), trunk(n);
  k3test::run_ranks(n, [&](int r, std::shared_ptr<k3::Comm> comm) {
    k3::ModelOptions o = mo;
    o.comm = comm;
    const k3::Model m(*ck, o);
    bytes[static_cast<size_t>(r)] = range_bytes(m);
    own[static_cast<size_t>(r)] = m.shard().expert_bytes + m.shard().lm_head_bytes;
    trunk[static_cast<size_t>(r)] = m.shard().trunk_bytes;
  });
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(bytes[static_cast<size_t>(r)] - own[static_cast<size_t>(r)],
              replicated - (one.shard().trunk_bytes - trunk[static_cast<size_t>(r)]))
        << r;
}

TEST(ExpertParallel, StreamedExpertsReadOnlyTheRanksOwn) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("few_experts", 1));
  // Next-layer prefetch reads predicted experts as well, and how many of its mispredicted reads begin
  // before they are cancelled depends on timing, so the byte count is exact only without it; with it,
  // the bits and the expert-less rank's zero bytes still hold.
  for (const bool prefetch : {false, true}) {
    k3::ExpertStoreOptions so;
    so.direct = false;
    so.io_threads = 2;
    so.prefetch = prefetch;
    k3::ModelOptions mo;
    mo.exec.threads = 1;
    mo.expert_store = std::make_shared<k3::ExpertStore>(*ck, so);
    const std::vector<float> one = run_model(k3::Model(*ck, mo));
    const uint64_t one_bytes = mo.expert_store->stats().bytes_read;
    const int n = 4;  // 3 experts: rank 3 holds none
    std::vector<std::vector<float>> got(n);
    std::vector<uint64_t> bytes(n);
    k3test::run_ranks(n, [&](int r, std::shared_ptr<k3::Comm> comm) {
      k3::ModelOptions o = mo;
      o.comm = comm;
      o.expert_store = std::make_shared<k3::ExpertStore>(*ck, so);
      got[static_cast<size_t>(r)] = run_model(k3::Model(*ck, o));
      bytes[static_cast<size_t>(r)] = o.expert_store->stats().bytes_read;
    });
    uint64_t sum = 0;
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(same_bits(got[static_cast<size_t>(r)], one)) << "rank " << r << " prefetch " << prefetch;
      sum += bytes[static_cast<size_t>(r)];
    }
    EXPECT_EQ(bytes[3], 0u) << "the rank without experts read expert bytes, prefetch " << prefetch;
    if (!prefetch) EXPECT_EQ(sum, one_bytes) << "every expert read once, by its rank";
  }
}

TEST(ExpertParallel, FingerprintIsTheOneProcessValueOnEveryRank) {
  auto ck = k3::Checkpoint::open(k3test::tiny_checkpoint("odd_experts", 1));
  k3::ModelOptions mo;
  mo.exec.threads = 1;
  const std::string one = k3::model_fingerprint(*ck, k3::Model(*ck, mo));
  std::vector<std::string> fp(3);
  k3test::run_ranks(3, [&](int r, std::shared_ptr<k3::Comm> comm) {
    k3::ModelOptions o = mo;
    o.comm = comm;
    const k3::Model m(*ck, o);
    k3::check_ranks_agree(*ck, m, "build-1");
    fp[static_cast<size_t>(r)] = k3::model_fingerprint(*ck, m);
  });
  for (const std::string& f : fp) EXPECT_EQ(f, one);
}

TEST(ExpertParallel, RanksWithAnotherCheckpointOrBuildRefuseToStart) {
  auto a = k3::Checkpoint::open(k3test::tiny_checkpoint("odd_experts", 1));
  auto b = k3::Checkpoint::open(k3test::tiny_checkpoint("odd_experts", 2));  // same shapes, other bytes
  k3::ModelOptions mo;
  mo.exec.threads = 1;
  for (int differ : {0, 1}) {  // 0: rank 1 opened another checkpoint; 1: rank 2 runs another build
    std::vector<std::string> errors(3);
    k3test::run_ranks(3, [&](int r, std::shared_ptr<k3::Comm> comm) {
      k3::ModelOptions o = mo;
      o.comm = comm;
      const k3::Checkpoint& ck = differ == 0 && r == 1 ? *b : *a;
      const k3::Model m(ck, o);
      try {
        k3::check_ranks_agree(ck, m, differ == 1 && r == 2 ? "build-2" : "build-1");
      } catch (const k3::Error& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
    for (const std::string& e : errors) {
      SCOPED_TRACE(e);
      ASSERT_FALSE(e.empty()) << "every rank refuses";
      if (differ == 0) {
        EXPECT_NE(e.find("rank 1 ("), std::string::npos);
        EXPECT_NE(e.find("the bytes of the replicated tensors"), std::string::npos);
        EXPECT_EQ(e.find("rank 2 ("), std::string::npos);
      } else {
        EXPECT_NE(e.find("rank 2 ("), std::string::npos);
        EXPECT_NE(e.find("the k3 binary"), std::string::npos);
      }
    }
  }
}
