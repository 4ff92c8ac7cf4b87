// Images in the runtime (runtime/image_prompt.h, generator.h, prefix_cache.h): prefill with
// image rows equals the lone forward whatever n_batch; the prefix cache keys blocks by image
// content — the same image is reused (bit-identical continuation), a different image at the
// same positions never shares a block; the chat media block of a tiny checkpoint with a tower.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <span>
#include <vector>

#include "core/error.h"
#include "runtime/generator.h"
#include "runtime/image_prompt.h"
#include "runtime/model_fingerprint.h"
#include "runtime/prefix_cache.h"
#include "runtime/scheduler.h"
#include "runtime_test_util.h"

namespace {

std::vector<int32_t> ids_of(int n, int seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 131 + seed * 17 + 7) % 250 + 1);
  return v;
}

std::vector<float> random_rows(int64_t n, int64_t D, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> r(static_cast<size_t>(n * D));
  for (float& x : r) x = nd(rng);
  return r;
}

std::unique_ptr<k3::PrefixCache> make_cache(const k3::LoadedModel& lm) {
  k3::PrefixCacheOptions o;
  o.block_tokens = 64;
  o.ram_bytes = 256ull << 20;
  return std::make_unique<k3::PrefixCache>(*lm.model, k3::model_fingerprint(*lm.checkpoint, *lm.model), o);
}

TEST(ImagePrompt, PrefillWithImageRowsIsTheSameForEveryBatchSize) {
  const k3::LoadedModel& lm = k3test::tiny();
  const int64_t D = lm.model->config().hidden_size;
  const std::vector<int32_t> ids = ids_of(150, 1);
  const std::vector<float> rows = random_rows(40, D, 1);
  const k3::EmbedRows er{50, 40, rows};
  k3::SequenceState one = lm.model->new_sequence();
  const std::vector<float> ref = lm.model->forward(one, ids, std::span<const k3::EmbedRows>(&er, 1), false);
  for (int64_t nb : {64, 128, 1000}) {  // on the KDA chunk grid (split-exact)
    k3::SequenceState s = lm.model->new_sequence();
    EXPECT_EQ(k3::prefill(*lm.model, s, ids, nb, {}, std::span<const k3::EmbedRows>(&er, 1)), ref) << nb;
  }
}

TEST(ImagePrompt, PrefixCacheReusesTheSameImageAndNeverMixesTwo) {
  const k3::LoadedModel& lm = k3test::tiny();
  const k3::Model& m = *lm.model;
  const int64_t D = m.config().hidden_size;
  const std::vector<int32_t> ids = ids_of(300, 2);
  const int64_t pos = 80, n = 60;  // inside blocks 1 and 2 (block 0 is text only)
  const std::vector<float> img1 = random_rows(n, D, 11), img2 = random_rows(n, D, 12);
  const k3::EmbedRows e1{pos, n, img1}, e2{pos, n, img2};
  const k3::MediaKey k1{pos, n, 0x1111}, k2{pos, n, 0x2222};
  auto lone = [&](const k3::EmbedRows& e) {
    k3::SequenceState s = m.new_sequence();
    return m.forward(s, ids, std::span<const k3::EmbedRows>(&e, 1), false);
  };
  const std::vector<float> want1 = lone(e1), want2 = lone(e2);
  ASSERT_NE(want1, want2);
  auto cache = make_cache(lm);
  auto run = [&](const k3::EmbedRows& e, const k3::MediaKey& k, int64_t* reused) {
    k3::SequenceState s = m.new_sequence();
    k3::PrefixCache::Pin pin;
    return k3::prefill_cached(m, *cache, s, ids, 64, &pin, reused, {}, std::span<const k3::EmbedRows>(&e, 1),
                              std::span<const k3::MediaKey>(&k, 1));
  };
  int64_t reused = -1;
  EXPECT_EQ(run(e1, k1, &reused), want1);
  EXPECT_EQ(reused, 0);
  // the same image: every block up to the last snapshot is reused, and the result is exact
  EXPECT_EQ(run(e1, k1, &reused), want1);
  EXPECT_GE(reused, 192);
  // another image at the same positions with the same ids: at most block 0 (before it) is shared
  EXPECT_EQ(run(e2, k2, &reused), want2);
  EXPECT_LE(reused, 64);
  // and the first image is still found after the second was stored
  EXPECT_EQ(run(e1, k1, &reused), want1);
  EXPECT_GE(reused, 192);
  // the same image in the next turn (the prompt extended): its blocks are reused
  std::vector<int32_t> longer = ids;
  const std::vector<int32_t> more = ids_of(100, 3);
  longer.insert(longer.end(), more.begin(), more.end());
  k3::SequenceState s = m.new_sequence();
  k3::PrefixCache::Pin pin;
  const std::vector<float> got = k3::prefill_cached(m, *cache, s, longer, 64, &pin, &reused, {},
                                                    std::span<const k3::EmbedRows>(&e1, 1),
                                                    std::span<const k3::MediaKey>(&k1, 1));
  EXPECT_GE(reused, 256);
  k3::SequenceState t = m.new_sequence();
  EXPECT_EQ(got, m.forward(t, longer, std::span<const k3::EmbedRows>(&e1, 1), false));
}

// The scheduler of `k3 serve`: requests with images (prompt pieces cut by the step budget, next to
// a text-only request and decode rows, through the prefix cache twice) give the ids of generate()
// with the same rows; a second request with the same ids and another image gives that image's ids.
TEST(ImagePrompt, SchedulerEqualsLoneGenerateWithImages) {
  const k3::LoadedModel& lm = k3test::tiny();
  const k3::Model& m = *lm.model;
  const int64_t D = m.config().hidden_size;
  auto image_prompt = [&](unsigned seed) {
    auto ip = std::make_shared<k3::ImagePrompt>();
    ip->ids = ids_of(230, 4);
    for (int i = 0; i < 60; ++i) ip->ids[static_cast<size_t>(165 + i)] = 277;  // the pads, near the end
    ip->media = {{165, 60, 0}};
    ip->rows = {random_rows(60, D, seed)};
    for (float& x : ip->rows[0]) x *= 8.f;  // loud enough to change the tiny model's greedy ids
    ip->digests = {seed};
    ip->hidden = D;
    return ip;
  };
  auto alone = [&](const k3::ImagePrompt& ip) {
    k3::SequenceState seq = m.new_sequence();
    k3::SamplerParams sp;
    sp.temp = 0;
    k3::Sampler sampler(sp);
    k3::GenerateOptions opt;
    opt.n_predict = 6;
    opt.n_ctx = 1024;
    const std::vector<k3::EmbedRows> rows = ip.embeds();
    opt.embeds = rows;
    std::vector<int32_t> out;
    k3::generate(m, seq, ip.ids, sampler, opt, [&](int32_t id) {
      out.push_back(id);
      return true;
    });
    return out;
  };
  auto cache = make_cache(lm);
  k3::Scheduler::Options so;
  so.n_parallel = 2;
  so.n_ctx = 1024;
  so.step_tokens = 100;  // the image is cut across steps
  so.cache = cache.get();
  k3::Scheduler sched(m, so);
  auto drain = [](k3::SeqHandle& h) {
    std::vector<int32_t> ids;
    while (true) {
      auto e = h.next(std::chrono::seconds(60));
      if (!e) {
        ADD_FAILURE() << "no event";
        return ids;
      }
      if (e->done) {
        EXPECT_EQ(e->error, "");
        return ids;
      }
      ids.push_back(e->id);
    }
  };
  auto submit = [&](std::shared_ptr<const k3::ImagePrompt> ip) {
    k3::SeqRequest r;
    r.prompt = ip ? ip->ids : ids_of(90, 9);
    r.sampling.temp = 0;
    r.max_tokens = 6;
    r.images = std::move(ip);
    return sched.submit(r);
  };
  const auto a = image_prompt(1), b = image_prompt(2);
  const std::vector<int32_t> want_a = alone(*a), want_b = alone(*b);
  ASSERT_NE(want_a, want_b);
  for (int round = 0; round < 2; ++round) {  // the second round resumes from the prefix cache
    auto ha = submit(a);
    auto ht = submit(nullptr);
    EXPECT_EQ(drain(*ha), want_a) << round;
    drain(*ht);
    EXPECT_EQ(drain(*submit(b)), want_b) << round;
  }
  EXPECT_GT(cache->stats().tokens_reused, 0u);
  // a prompt whose ids do not match its images is refused
  k3::SeqRequest bad;
  bad.prompt = ids_of(10, 1);
  bad.images = a;
  EXPECT_THROW(sched.submit(bad), k3::Error);
}

TEST(ImagePrompt, DigestNamesTheTowerInput) {
  k3::vision::ImagePatches a;
  a.grid_h = 2;
  a.grid_w = 2;
  a.patches.assign(4 * k3::vision::kPatchValues, 0.25f);
  k3::vision::ImagePatches b = a;
  EXPECT_EQ(k3::image_digest(a), k3::image_digest(b));
  b.patches[100] = 0.5f;
  EXPECT_NE(k3::image_digest(a), k3::image_digest(b));
  k3::vision::ImagePatches c = a;  // same values, another grid
  c.grid_h = 4;
  c.grid_w = 1;
  EXPECT_NE(k3::image_digest(a), k3::image_digest(c));
  a.name = "renamed";  // the name is not content
  EXPECT_EQ(k3::image_digest(a), k3::image_digest(k3::vision::ImagePatches{2, 2, a.patches, 0, 0, "x"}));
}

TEST(ImagePrompt, TextOnlyCheckpointRefusesAnImage) {
  const k3::LoadedModel& lm = k3test::tiny();
  k3::vision::ImagePatches im;
  im.grid_h = im.grid_w = 2;
  im.patches.assign(4 * k3::vision::kPatchValues, 0.f);
  im.width = im.height = 28;
  const nlohmann::ordered_json msgs = nlohmann::ordered_json::parse(
      R"([{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"hi"}]}])");
  try {
    k3::build_image_prompt(*lm.tokenizer, nullptr, lm.model->config().hidden_size, msgs, {},
                           std::span<const k3::vision::ImagePatches>(&im, 1));
    ADD_FAILURE() << "accepted";
  } catch (const k3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no vision tower"), std::string::npos) << e.what();
  }
}

}  // namespace
