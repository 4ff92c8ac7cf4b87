// k3::PrefixCache (K3's hybrid prefix cache, spec algorithms.md §6) on K3-mini: a continuation
// after a hit equals recomputation bit for bit (logits, KDA states, MLA rows, greedy ids) when
// the block size is a multiple of 64 (on or off the prefill-chunk grid); a 10-turn
// chat; a tool-call loop; two concurrent continuations of one cached prefix through the
// scheduler; eviction under a tiny budget with pinned blocks; the disk tier across a restart;
// corrupt, truncated and foreign disk files are misses.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "model/sequence_state.h"
#include "runtime/generator.h"
#include "runtime/loaded_model.h"
#include "runtime/model_fingerprint.h"
#include "runtime/prefix_cache.h"
#include "runtime/scheduler.h"
#include "tokenizer/chat_k3.h"
#include "tokenizer/chat_output.h"

namespace {

using namespace std::chrono_literals;

const k3::LoadedModel& mini() {
  static const k3::LoadedModel m = k3::LoadedModel::open(std::filesystem::path(K3_SOURCE_DIR) / "models" / "k3-mini");
  return m;
}

/// K3-mini bound with another prefill chunk (exact MXFP4 path, as `k3 logits`).
const k3::Model& model_chunk(int64_t chunk) {
  static std::map<int64_t, std::unique_ptr<k3::Model>> models;
  auto& m = models[chunk];
  if (!m) {
    k3::ModelOptions o;
    o.prefill_chunk = chunk;
    o.exec.mxfp4 = k3::Mxfp4Path::ExactF32;
    m = std::make_unique<k3::Model>(*mini().checkpoint, o);
  }
  return *m;
}

std::unique_ptr<k3::PrefixCache> make_cache(const k3::Model& m, int64_t block, uint64_t ram = 256ull << 20,
                                            const std::filesystem::path& dir = {}, std::string fp = {}) {
  k3::PrefixCacheOptions o;
  o.block_tokens = block;
  o.ram_bytes = ram;
  o.disk_dir = dir;
  o.disk_bytes = 1ull << 30;
  if (fp.empty()) fp = k3::model_fingerprint(*mini().checkpoint, m);
  return std::make_unique<k3::PrefixCache>(m, fp, o);
}

std::vector<int32_t> ids_of(int n, int seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  const int64_t V = mini().tokenizer->vocab_size();
  for (int i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 7919 + seed * 104729 + 13) % (V - 600) + 256);
  return v;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// First difference between two states, or "" when bit-identical.
std::string state_diff(const k3::SequenceState& a, const k3::SequenceState& b) { return k3::state_difference(a, b); }

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return num / std::max(den, 1e-30);
}

/// Greedy continuation of `seq` from `logits`: n ids and the logits of each step.
std::vector<int32_t> greedy(const k3::Model& m, k3::SequenceState& seq, std::vector<float> logits, int n,
                            std::vector<std::vector<float>>* rows = nullptr) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    int32_t best = 0;
    for (int32_t v = 1; v < static_cast<int32_t>(logits.size()); ++v)
      if (logits[v] > logits[best]) best = v;
    out.push_back(best);
    logits = m.forward(seq, std::span<const int32_t>(&best, 1), false);
    if (rows) rows->push_back(logits);
  }
  return out;
}

TEST(PrefixCache, HitEqualsRecomputationBitwise) {
  const k3::Model& m = model_chunk(64);
  auto cache = make_cache(m, 64);
  const std::vector<int32_t> a = ids_of(300, 1);
  const std::vector<int32_t> b = cat(std::vector<int32_t>(a.begin(), a.begin() + 290), ids_of(70, 2));

  // A cold run through the cache (pieces cut at snapshot points) equals a plain prefill.
  k3::SequenceState s1 = m.new_sequence(), ref1 = m.new_sequence();
  int64_t reused = -1;
  const std::vector<float> l1 = k3::prefill_cached(m, *cache, s1, a, 512, nullptr, &reused);
  EXPECT_EQ(reused, 0);
  EXPECT_EQ(l1, k3::prefill(m, ref1, a, 512));
  EXPECT_EQ(state_diff(s1, ref1), "");
  // A's replay boundary floor(299/64)*64 = 256 holds a snapshot: B resumes there.
  k3::SequenceState s2 = m.new_sequence(), ref2 = m.new_sequence();
  k3::PrefixCache::Pin pin;
  const std::vector<float> l2 = k3::prefill_cached(m, *cache, s2, b, 512, &pin, &reused);
  EXPECT_EQ(reused, 256);
  const std::vector<float> r2 = k3::prefill(m, ref2, b, 512);
  EXPECT_EQ(l2, r2) << "max rel " << max_rel(l2, r2);
  EXPECT_EQ(state_diff(s2, ref2), "");
  std::vector<std::vector<float>> rows_c, rows_r;
  EXPECT_EQ(greedy(m, s2, l2, 8, &rows_c), greedy(m, ref2, r2, 8, &rows_r));
  EXPECT_EQ(rows_c, rows_r);
  const k3::PrefixCacheStats st = cache->stats();
  EXPECT_EQ(st.lookups, 2u);
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.tokens_reused, 256u);
  EXPECT_GT(st.ram_snapshots, 0u);
}

TEST(PrefixCache, BlockLargerThanChunkIsBitwiseToo) {
  const k3::Model& m = model_chunk(64);
  auto cache = make_cache(m, 128);
  const std::vector<int32_t> a = ids_of(400, 3);
  k3::SequenceState s = m.new_sequence();
  k3::prefill_cached(m, *cache, s, a, 512, nullptr, nullptr);
  const std::vector<int32_t> b = cat(a, ids_of(20, 4));
  k3::SequenceState s2 = m.new_sequence(), ref = m.new_sequence();
  int64_t reused = 0;
  const std::vector<float> l = k3::prefill_cached(m, *cache, s2, b, 512, nullptr, &reused);
  EXPECT_EQ(reused, 384);
  EXPECT_EQ(l, k3::prefill(m, ref, b, 512));
  EXPECT_EQ(state_diff(s2, ref), "");
}

TEST(PrefixCache, ResumeOffTheChunkGridIsBitwiseToo) {
  // Blocks of 64 with a prefill chunk of 128: a resume at 192 cuts pieces off the one-pass grid.
  const k3::Model& m = model_chunk(128);
  auto cache = make_cache(m, 64);
  const std::vector<int32_t> a = ids_of(200, 5);
  k3::SequenceState s = m.new_sequence();
  k3::prefill_cached(m, *cache, s, a, 512, nullptr, nullptr);
  const std::vector<int32_t> b = cat(a, ids_of(150, 6));
  k3::SequenceState s2 = m.new_sequence(), ref = m.new_sequence();
  int64_t reused = 0;
  const std::vector<float> l = k3::prefill_cached(m, *cache, s2, b, 512, nullptr, &reused);
  EXPECT_EQ(reused, 192);
  const std::vector<float> r = k3::prefill(m, ref, b, 512);
  EXPECT_LE(max_rel(l, r), 1e-6);
  EXPECT_EQ(greedy(m, s2, l, 8), greedy(m, ref, r, 8));
  // In fact every piece computes its rows as the one-pass prefill does (the KDA chunks stay on
  // the 64-grid, GEMMs are batch-invariant): bit-identical, also when the prompt's last block
  // boundary leaves a single id (n - 1 = 256: the resume backs off to keep two).
  EXPECT_EQ(l, r);
  EXPECT_EQ(state_diff(s2, ref), "");
  for (int n : {257, 258, 321, 385}) {
    const std::vector<int32_t> c = cat(a, ids_of(n - 200, 40 + n));
    k3::SequenceState sc = m.new_sequence(), rc = m.new_sequence();
    int64_t re = 0;
    EXPECT_EQ(k3::prefill_cached(m, *cache, sc, c, 512, nullptr, &re), k3::prefill(m, rc, c, 512)) << "n " << n;
    EXPECT_EQ(state_diff(sc, rc), "") << "n " << n;
    EXPECT_GT(re, 0) << "n " << n;
  }
}

TEST(PrefixCache, TenTurnChatEqualsRecomputation) {
  const k3::Model& m = model_chunk(64);
  const k3::Tokenizer& tok = *mini().tokenizer;
  auto cache = make_cache(m, 64);
  k3::ChatOptions copt;
  copt.thinking = false;
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  msgs.push_back(
      {{"role", "system"}, {"content", "You are a helpful assistant who answers from the King James Bible."}});
  const char* questions[10] = {"Who made the heaven?",
                               "And the earth?",
                               "What was upon the face of the deep?",
                               "What did God say?",
                               "Was it good?",
                               "What divided the light?",
                               "What was the evening and the morning?",
                               "What was in the midst of the waters?",
                               "What did he call the dry land?",
                               "What did the earth bring forth?"};
  k3::GenerateOptions go;
  go.n_predict = 12;
  go.n_ctx = 4096;
  go.n_vocab = tok.vocab_size();
  int64_t last_reused = 0;
  for (int turn = 0; turn < 10; ++turn) {
    msgs.push_back({{"role", "user"}, {"content", questions[turn]}});
    const std::vector<int32_t> prompt = k3::render_chat(tok, msgs, copt);
    k3::SamplerParams sp;
    sp.temp = 0;
    k3::Sampler sa(sp), sb(sp);
    k3::SequenceState with = m.new_sequence(), without = m.new_sequence();
    go.cache = cache.get();
    const k3::GenerateResult rc = k3::generate(m, with, prompt, sa, go, [](int32_t) { return true; });
    go.cache = nullptr;
    const k3::GenerateResult rr = k3::generate(m, without, prompt, sb, go, [](int32_t) { return true; });
    ASSERT_EQ(rc.ids, rr.ids) << "turn " << turn;
    EXPECT_EQ(state_diff(with, without), "") << "turn " << turn;
    EXPECT_EQ(rc.n_reused + rc.n_prompt, static_cast<int64_t>(prompt.size()));
    if (turn > 0 && prompt.size() > 128) EXPECT_GE(rc.n_reused, last_reused) << "turn " << turn;
    last_reused = rc.n_reused;
    const k3::ParsedOutput out = k3::parse_k3_output(tok, rc.ids, copt.thinking);
    msgs.push_back({{"role", "assistant"}, {"content", out.content}});
  }
  EXPECT_GE(last_reused, 192);  // the tenth turn resumes deep into the conversation
}

TEST(PrefixCache, ToolCallLoopEqualsRecomputation) {
  const k3::Model& m = model_chunk(64);
  const k3::Tokenizer& tok = *mini().tokenizer;
  auto cache = make_cache(m, 64);
  k3::ChatOptions copt;
  copt.thinking = false;
  copt.tools = nlohmann::ordered_json::parse(R"([{"type":"function","function":{"name":"lookup_verse",
      "description":"Returns the text of a verse of the King James Bible",
      "parameters":{"type":"object","properties":{"book":{"type":"string"},"chapter":{"type":"integer"},
      "verse":{"type":"integer"}},"required":["book","chapter","verse"]}}}])");
  nlohmann::ordered_json msgs =
      nlohmann::ordered_json::parse(R"([{"role":"user","content":"Quote Genesis 1:1 and 1:2."}])");
  k3::GenerateOptions go;
  go.n_predict = 12;
  go.n_vocab = tok.vocab_size();
  int64_t reused_total = 0;
  for (int call = 0; call < 4; ++call) {
    const std::vector<int32_t> prompt = k3::render_chat(tok, msgs, copt);
    k3::SamplerParams sp;
    sp.temp = 0;
    k3::Sampler sa(sp), sb(sp);
    k3::SequenceState with = m.new_sequence(), without = m.new_sequence();
    go.cache = cache.get();
    const k3::GenerateResult rc = k3::generate(m, with, prompt, sa, go, [](int32_t) { return true; });
    go.cache = nullptr;
    const k3::GenerateResult rr = k3::generate(m, without, prompt, sb, go, [](int32_t) { return true; });
    ASSERT_EQ(rc.ids, rr.ids) << "call " << call;
    reused_total += rc.n_reused;
    // The agent loop: the assistant calls the tool, the tool answers, and so on.
    const std::string id = "call_" + std::to_string(call);
    msgs.push_back(
        {{"role", "assistant"},
         {"content", ""},
         {"tool_calls",
          {{{"id", id},
            {"type", "function"},
            {"function",
             {{"name", "lookup_verse"},
              {"arguments", "{\"book\":\"Genesis\",\"chapter\":1,\"verse\":" + std::to_string(call + 1) + "}"}}}}}}});
    msgs.push_back({{"role", "tool"},
                    {"tool_call_id", id},
                    {"content",
                     "In the beginning God created the heaven and the earth. And the earth was without "
                     "form, and void; and darkness was upon the face of the deep."}});
  }
  EXPECT_GT(reused_total, 0);
}

k3::SeqRequest request(std::vector<int32_t> prompt, int64_t max_tokens) {
  k3::SeqRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temp = 0;
  return r;
}

std::vector<int32_t> drain(k3::SeqHandle& h) {
  std::vector<int32_t> ids;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto e = h.next(100ms);
    if (!e) continue;
    if (e->done) return ids;
    ids.push_back(e->id);
  }
  ADD_FAILURE() << "sequence did not finish";
  return ids;
}

TEST(PrefixCache, SchedulerSharesOnePrefixBetweenConcurrentContinuations) {
  const k3::Model& m = model_chunk(64);
  auto cache = make_cache(m, 64);
  const std::vector<int32_t> system = ids_of(330, 7);
  const std::vector<int32_t> x = cat(system, ids_of(40, 8)), y = cat(system, ids_of(55, 9));
  auto alone = [&](const std::vector<int32_t>& p) {
    k3::SequenceState s = m.new_sequence();
    std::vector<float> l = k3::prefill(m, s, p, 512);
    return greedy(m, s, l, 10);
  };
  k3::Scheduler::Options so;
  so.n_parallel = 2;
  so.step_tokens = 128;
  so.cache = cache.get();
  std::vector<int32_t> got_sys, got_x, got_y;
  uint64_t blocks_after_first = 0;
  {
    k3::Scheduler sched(m, so);
    got_sys = drain(*sched.submit(request(system, 10)));
    blocks_after_first = cache->stats().ram_blocks;
    auto hx = sched.submit(request(x, 10));
    auto hy = sched.submit(request(y, 10));
    got_x = drain(*hx);
    got_y = drain(*hy);
    EXPECT_EQ(sched.stats().prompt_tokens_reused, 2u * 320u);
  }
  EXPECT_EQ(got_sys, alone(system));
  EXPECT_EQ(got_x, alone(x));
  EXPECT_EQ(got_y, alone(y));
  const k3::PrefixCacheStats st = cache->stats();
  EXPECT_EQ(st.hits, 2u);
  EXPECT_EQ(st.tokens_reused, 640u);
  // The system prompt's 5 blocks are stored once: x and y add only their own full blocks.
  EXPECT_EQ(blocks_after_first, 5u);
  EXPECT_EQ(st.ram_blocks, 5u + 0u + 0u + (370 / 64 - 5) + (385 / 64 - 5));
}

TEST(PrefixCache, EvictionUnderTinyBudgetKeepsPinnedBlocksAndExactness) {
  const k3::Model& m = model_chunk(64);
  auto probe = make_cache(m, 64);
  const uint64_t block = probe->block_mla_bytes(), snap = probe->snapshot_bytes();
  auto cache = make_cache(m, 64, 4 * (block + snap) + 4096);
  const std::vector<int32_t> keep = ids_of(200, 10);
  k3::SequenceState s = m.new_sequence();
  k3::PrefixCache::Pin pin;
  k3::prefill_cached(m, *cache, s, keep, 512, &pin, nullptr);  // pinned while `pin` lives
  for (int i = 0; i < 6; ++i) {
    const std::vector<int32_t> other = ids_of(200, 20 + i);
    k3::SequenceState o = m.new_sequence();
    k3::prefill_cached(m, *cache, o, other, 512, nullptr, nullptr);
    EXPECT_LE(cache->stats().ram_bytes, cache->options().ram_bytes);
  }
  EXPECT_GT(cache->stats().evictions, 0u);
  const std::vector<int32_t> b = cat(keep, ids_of(30, 30));
  k3::SequenceState s2 = m.new_sequence(), ref = m.new_sequence();
  int64_t reused = 0;
  const std::vector<float> l = k3::prefill_cached(m, *cache, s2, b, 512, nullptr, &reused);
  EXPECT_EQ(reused, 192);  // the pinned chain survived every eviction
  EXPECT_EQ(l, k3::prefill(m, ref, b, 512));
  pin.release();
  for (int i = 0; i < 6; ++i) {
    k3::SequenceState o = m.new_sequence();
    k3::prefill_cached(m, *cache, o, ids_of(200, 40 + i), 512, nullptr, nullptr);
  }
  k3::SequenceState s3 = m.new_sequence();
  k3::prefill_cached(m, *cache, s3, b, 512, nullptr, &reused);
  EXPECT_EQ(reused, 0);  // released, then evicted
  // A budget smaller than one block stores nothing and never fails.
  auto none = make_cache(m, 64, 16);
  k3::SequenceState s4 = m.new_sequence(), ref4 = m.new_sequence();
  EXPECT_EQ(k3::prefill_cached(m, *none, s4, keep, 512, nullptr, nullptr), k3::prefill(m, ref4, keep, 512));
  EXPECT_EQ(none->stats().ram_blocks, 0u);
}

struct TempDir {
  std::filesystem::path p;
  TempDir() {
    char t[] = "/tmp/k3pc-XXXXXX";
    p = ::mkdtemp(t);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(p, ec);
  }
};

TEST(PrefixCache, DiskTierServesARestart) {
  const k3::Model& m = model_chunk(64);
  TempDir dir;
  const std::vector<int32_t> a = ids_of(300, 11);
  {
    auto c1 = make_cache(m, 64, 256ull << 20, dir.p);
    k3::SequenceState s = m.new_sequence();
    k3::prefill_cached(m, *c1, s, a, 512, nullptr, nullptr);
  }  // destruction writes every block to the directory
  auto c2 = make_cache(m, 64, 256ull << 20, dir.p);
  EXPECT_EQ(c2->stats().disk_blocks, 4u);
  const std::vector<int32_t> b = cat(a, ids_of(10, 12));
  k3::SequenceState s = m.new_sequence(), ref = m.new_sequence();
  int64_t reused = 0;
  const std::vector<float> l = k3::prefill_cached(m, *c2, s, b, 512, nullptr, &reused);
  EXPECT_EQ(reused, 256);
  EXPECT_EQ(c2->stats().disk_reads, 4u);
  EXPECT_EQ(l, k3::prefill(m, ref, b, 512));
  EXPECT_EQ(state_diff(s, ref), "");
}

TEST(PrefixCache, EvictedBlocksGoToDiskAndComeBack) {
  const k3::Model& m = model_chunk(64);
  TempDir dir;
  auto probe = make_cache(m, 64);
  auto c = make_cache(m, 64, 3 * (probe->block_mla_bytes() + probe->snapshot_bytes()), dir.p);
  const std::vector<int32_t> a = ids_of(300, 13);
  k3::SequenceState s = m.new_sequence();
  k3::prefill_cached(m, *c, s, a, 512, nullptr, nullptr);
  for (int i = 0; i < 3; ++i) {
    k3::SequenceState o = m.new_sequence();
    k3::prefill_cached(m, *c, o, ids_of(300, 50 + i), 512, nullptr, nullptr);
  }
  EXPECT_GT(c->stats().disk_writes, 0u);
  k3::SequenceState s2 = m.new_sequence(), ref = m.new_sequence();
  int64_t reused = 0;
  const std::vector<int32_t> b = cat(a, ids_of(5, 14));
  EXPECT_EQ(k3::prefill_cached(m, *c, s2, b, 512, nullptr, &reused), k3::prefill(m, ref, b, 512));
  EXPECT_EQ(reused, 256);
  EXPECT_GT(c->stats().disk_reads, 0u);
}

TEST(PrefixCache, CorruptTruncatedOrForeignDiskFilesAreMisses) {
  const k3::Model& m = model_chunk(64);
  TempDir dir;
  const std::vector<int32_t> a = ids_of(200, 15);
  {
    auto c1 = make_cache(m, 64, 256ull << 20, dir.p);
    k3::SequenceState s = m.new_sequence();
    k3::prefill_cached(m, *c1, s, a, 512, nullptr, nullptr);
  }
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir.p)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 3u);
  const std::vector<int32_t> b = cat(a, ids_of(10, 16));
  auto check = [&](int64_t want_reused, uint64_t want_rejected) {
    auto c = make_cache(m, 64, 256ull << 20, dir.p);
    k3::SequenceState s = m.new_sequence(), ref = m.new_sequence();
    int64_t reused = -1;
    EXPECT_EQ(k3::prefill_cached(m, *c, s, b, 512, nullptr, &reused), k3::prefill(m, ref, b, 512));
    EXPECT_EQ(reused, want_reused);
    EXPECT_EQ(c->stats().disk_rejected, want_rejected);
  };
  // Flip one payload byte of the block holding the snapshot (the largest file).
  std::sort(files.begin(), files.end(),
            [](auto& x, auto& y) { return std::filesystem::file_size(x) > std::filesystem::file_size(y); });
  {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(files[0]) / 2));
    char c = 0;
    f.read(&c, 1);
    f.seekp(-1, std::ios::cur);
    c = static_cast<char>(c ^ 0x10);
    f.write(&c, 1);
  }
  check(0, 1);  // the snapshot block is refused (and removed): no usable hit
  // Rebuild, then truncate a middle block: the chain breaks there.
  {
    auto c1 = make_cache(m, 64, 256ull << 20, dir.p);
    k3::SequenceState s = m.new_sequence();
    k3::prefill_cached(m, *c1, s, a, 512, nullptr, nullptr);
  }
  files.clear();
  for (const auto& e : std::filesystem::directory_iterator(dir.p)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 3u);
  std::sort(files.begin(), files.end(),
            [](auto& x, auto& y) { return std::filesystem::file_size(x) < std::filesystem::file_size(y); });
  std::filesystem::resize_file(files[0], std::filesystem::file_size(files[0]) / 3);
  check(0, 1);
  // A file of another model under this model's key name is refused by its fingerprint.
  TempDir other;
  {
    auto c1 = make_cache(m, 64, 256ull << 20, other.p, "0123456789abcdef");
    k3::SequenceState s = m.new_sequence();
    k3::prefill_cached(m, *c1, s, a, 512, nullptr, nullptr);
  }
  {
    auto c1 = make_cache(m, 64, 256ull << 20, dir.p);
    c1->clear();
    k3::SequenceState s = m.new_sequence();
    k3::prefill_cached(m, *c1, s, a, 512, nullptr, nullptr);
  }
  files.clear();
  for (const auto& e : std::filesystem::directory_iterator(dir.p)) files.push_back(e.path());
  std::sort(files.begin(), files.end(),
            [](auto& x, auto& y) { return std::filesystem::file_size(x) > std::filesystem::file_size(y); });
  std::vector<std::filesystem::path> foreign;
  for (const auto& e : std::filesystem::directory_iterator(other.p)) foreign.push_back(e.path());
  std::sort(foreign.begin(), foreign.end(),
            [](auto& x, auto& y) { return std::filesystem::file_size(x) > std::filesystem::file_size(y); });
  std::filesystem::copy_file(foreign[0], files[0], std::filesystem::copy_options::overwrite_existing);
  check(0, 1);
}

TEST(PrefixCache, PeriodicSnapshotsNeverLeaveALoneLastId) {
  // Default prefill chunk 256, blocks of 64, a snapshot at every block: prompts whose n - 1 is
  // a block boundary off the chunk grid are cut one block earlier, and stay bit-identical.
  const k3::Model& m = model_chunk(256);
  k3::PrefixCacheOptions o;
  o.block_tokens = 64;
  o.snapshot_every = 1;
  k3::PrefixCache c(m, k3::model_fingerprint(*mini().checkpoint, m), o);
  for (int n : {65, 129, 193, 257, 300}) {
    const std::vector<int32_t> p = ids_of(n, 60 + n);
    if ((n - 1) % 256 != 0)  // else both run the last id alone: a cut at n - 1 is allowed
      for (int64_t cut : c.snapshot_points(n)) EXPECT_LT(cut, n - 1) << "n " << n;
    k3::SequenceState s = m.new_sequence(), r = m.new_sequence();
    EXPECT_EQ(k3::prefill_cached(m, c, s, p, 512, nullptr, nullptr), k3::prefill(m, r, p, 512)) << "n " << n;
    EXPECT_EQ(state_diff(s, r), "") << "n " << n;
    const std::vector<int32_t> q = cat(p, ids_of(3, 90 + n));
    k3::SequenceState s2 = m.new_sequence(), r2 = m.new_sequence();
    EXPECT_EQ(k3::prefill_cached(m, c, s2, q, 512, nullptr, nullptr), k3::prefill(m, r2, q, 512)) << "n " << n;
  }
}

TEST(PrefixCache, ClearWithLivePinsKeepsReferencesRight) {
  const k3::Model& m = model_chunk(64);
  auto probe = make_cache(m, 64);
  auto c = make_cache(m, 64, 3 * (probe->block_mla_bytes() + probe->snapshot_bytes()));
  const std::vector<int32_t> a = ids_of(140, 70);
  k3::PrefixCache::Pin old;
  k3::SequenceState s = m.new_sequence();
  k3::prefill_cached(m, *c, s, a, 512, &old, nullptr);
  c->clear();
  // Another sequence stores the same blocks again and pins them; the stale pin's release must
  // not drop the new references (the blocks would become evictable while in use).
  k3::PrefixCache::Pin fresh;
  k3::SequenceState s2 = m.new_sequence();
  k3::prefill_cached(m, *c, s2, a, 512, &fresh, nullptr);
  old.release();
  for (int i = 0; i < 4; ++i) {
    k3::SequenceState o = m.new_sequence();
    k3::prefill_cached(m, *c, o, ids_of(140, 80 + i), 512, nullptr, nullptr);
  }
  k3::SequenceState s3 = m.new_sequence();
  int64_t reused = 0;
  k3::prefill_cached(m, *c, s3, cat(a, ids_of(5, 99)), 512, nullptr, &reused);
  EXPECT_EQ(reused, 128);  // still pinned by `fresh`, so never evicted
}

TEST(PrefixCache, OptionErrorsNameTheFlag) {
  const k3::Model& m = model_chunk(64);
  k3::PrefixCacheOptions o;
  o.block_tokens = 100;
  try {
    k3::PrefixCache c(m, "x", o);
    FAIL();
  } catch (const k3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--cache-block"), std::string::npos);
  }
  o.block_tokens = 64;
  o.disk_dir = "/proc/version/x";
  EXPECT_THROW(k3::PrefixCache(m, "x", o), k3::Error);
}

TEST(PrefixCache, SnapshotPolicy) {
  const k3::Model& m = model_chunk(64);
  auto c = make_cache(m, 64);
  // Auto interval: the smallest number of blocks whose MLA rows weigh at least one snapshot.
  const int64_t every = c->snapshot_every();
  EXPECT_GE(static_cast<uint64_t>(every) * c->block_mla_bytes(), c->snapshot_bytes());
  EXPECT_LT(static_cast<uint64_t>(every - 1) * c->block_mla_bytes(), c->snapshot_bytes());
  // Replay boundary: floor((n-1)/B)*B, also when n is a multiple of B.
  const int64_t E = every * 64;
  std::vector<int64_t> want;
  for (int64_t p = E; p < 1000; p += E) want.push_back(p);
  if (want.empty() || want.back() != 960) want.push_back(960);
  EXPECT_EQ(c->snapshot_points(1000), want);
  EXPECT_EQ(c->snapshot_points(64), std::vector<int64_t>{});
  const std::vector<int64_t> p129 = c->snapshot_points(129);
  EXPECT_EQ(p129.back(), 128);
}

// Partitions (k3 serve --cache-partition): a prompt cached in one partition is a miss in every
// other one, in RAM and in the disk tier after a restart, and a hit in its own; the outputs are
// those of the request run alone either way (the cache changes speed only).
TEST(PrefixCache, PartitionsNeverHitEachOthersBlocksInRamOrOnDisk) {
  const k3::Model& m = model_chunk(64);
  TempDir dir;
  const std::vector<int32_t> system = ids_of(330, 21);
  const std::vector<int32_t> x = cat(system, ids_of(40, 22)), w = ids_of(200, 23);
  auto alone = [&](const std::vector<int32_t>& p) {
    k3::SequenceState s = m.new_sequence();
    std::vector<float> l = k3::prefill(m, s, p, 512);
    return greedy(m, s, l, 8);
  };
  const uint64_t kA = 0x1111, kB = 0x2222;
  {
    auto cache = make_cache(m, 64, 256ull << 20, dir.p);
    k3::Scheduler::Options so;
    so.n_parallel = 1;
    so.step_tokens = 128;
    so.cache = cache.get();
    k3::Scheduler sched(m, so);
    auto in = [&](uint64_t part) {
      k3::SeqRequest r = request(x, 8);
      r.cache_partition = part;
      return r;
    };
    k3::SeqRequest first = request(system, 8);
    first.cache_partition = kA;
    EXPECT_EQ(drain(*sched.submit(std::move(first))), alone(system));
    EXPECT_EQ(drain(*sched.submit(in(kB))), alone(x));  // another partition: recomputed
    EXPECT_EQ(sched.stats().prompt_tokens_reused, 0u);
    EXPECT_EQ(drain(*sched.submit(in(0))), alone(x));  // the shared partition: recomputed
    EXPECT_EQ(sched.stats().prompt_tokens_reused, 0u);
    EXPECT_EQ(drain(*sched.submit(in(kA))), alone(x));  // its own partition: a hit
    EXPECT_EQ(sched.stats().prompt_tokens_reused, 320u);
    EXPECT_EQ(cache->stats().hits, 1u);
    k3::SeqRequest only_a = request(w, 8);  // cached in partition A only
    only_a.cache_partition = kA;
    EXPECT_EQ(drain(*sched.submit(std::move(only_a))), alone(w));
  }  // destruction writes every block to the directory
  auto c2 = make_cache(m, 64, 256ull << 20, dir.p);
  const std::vector<int32_t> w2 = cat(w, ids_of(10, 24));
  for (uint64_t part : {kB, uint64_t{0}}) {
    k3::SequenceState s = m.new_sequence();
    k3::PrefixCache::Pin pin;
    EXPECT_EQ(c2->lookup(w2, &s, &pin, part), 0) << "partition " << part;
  }
  EXPECT_EQ(c2->stats().disk_reads, 0u);
  k3::SequenceState s = m.new_sequence(), ref = m.new_sequence();
  k3::PrefixCache::Pin pin;
  EXPECT_EQ(c2->lookup(w2, &s, &pin, kA), 192);
  EXPECT_EQ(c2->stats().disk_reads, 3u);
  std::vector<float> l = m.forward(s, std::span<const int32_t>(w2).subspan(192), false);
  EXPECT_EQ(l, k3::prefill(m, ref, w2, 512));
}

}  // namespace
