// Prefix-cache flags of `k3 chat`, `k3 serve` and `k3 run` (llama-server's --cache-ram name),
// and the one stats phrase they print. The cache itself: src/runtime/prefix_cache.h.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "flag_checks.h"
#include "ranks.h"
#include "runtime/loaded_model.h"
#include "runtime/model_fingerprint.h"
#include "runtime/prefix_cache.h"

namespace k3cli {

struct CacheFlags {
  bool no_cache = false;
  int64_t ram_mib;  ///< --cache-ram MiB
  std::string dir;  ///< --cache-dir DIR (disk tier; empty = none)
  int64_t disk_mib = 4096;
  int64_t block = 64;  ///< --cache-block tokens
  int64_t snapshot_every = 0;

  /// `default_ram_mib`: 0 leaves the RAM tier off unless --cache-ram or --cache-dir is given
  /// (`k3 run`: one prompt per process, only the disk tier can help).
  explicit CacheFlags(int64_t default_ram_mib = 512) : ram_mib(default_ram_mib) {}

  void add_to(CLI::App* sub) {
    sub->add_flag("--no-cache", no_cache, "turn the prefix cache off (every prompt is prefilled in full)");
    sub->add_option("--cache-ram", ram_mib, "prefix cache RAM budget in MiB (MLA blocks + KDA snapshots; 0 = off)")
        ->capture_default_str()
        ->check(IntRange(0, int64_t{1} << 40));
    sub->add_option(
        "--cache-dir", dir,
        "prefix cache disk tier: evicted blocks (and all blocks at exit) are written here and read "
        "back, across restarts (trusted: it must be this user's, not writable by every user, and used by one "
        "process at a time)");
    sub->add_option("--cache-disk", disk_mib, "prefix cache disk budget in MiB (with --cache-dir)")
        ->capture_default_str()
        ->check(IntRange(1, int64_t{1} << 40));
    sub->add_option("--cache-block", block,
                    "prefix cache block in tokens, a multiple of 64 (resumed logits are bit-identical "
                    "for every size; smaller blocks reuse more of each prompt)")
        ->capture_default_str()
        ->check(IntRange(64, int64_t{1} << 30));
    sub->add_option("--cache-snapshot-every", snapshot_every,
                    "blocks between KDA state snapshots (0 = auto: snapshots weigh about as much as the MLA "
                    "blocks between them; each prompt's last block boundary always gets one)")
        ->capture_default_str()
        ->check(IntRange(0, int64_t{1} << 30));
  }

  /// The cache these flags ask for, or null when it is off. Errors: k3::Error naming the flag
  /// (also when the model's --cache-type is not f32: the prefix cache holds f32 rows).
  std::unique_ptr<k3::PrefixCache> make(const k3::LoadedModel& lm) const {
    if (no_cache || (ram_mib == 0 && dir.empty())) return nullptr;
    if (lm.model->options().mla_cache != k3::MlaCacheType::F32)
      throw k3::Error(std::string("--cache-type ") + k3::mla_cache_type_name(lm.model->options().mla_cache) +
                      ": the prefix cache stores f32 MLA rows; add --no-cache, or use --cache-type f32");
    if (!dir.empty()) refuse_ranks("--cache-dir (the prefix cache on disk)");
    k3::PrefixCacheOptions o;
    o.block_tokens = block;
    o.snapshot_every = snapshot_every;
    // A disk tier without a RAM budget still needs room for the blocks of one prompt in flight.
    o.ram_bytes = static_cast<uint64_t>(ram_mib > 0 ? ram_mib : 64) << 20;
    o.disk_dir = dir;
    o.disk_bytes = static_cast<uint64_t>(disk_mib) << 20;
    return std::make_unique<k3::PrefixCache>(*lm.model, k3::model_fingerprint(*lm.checkpoint, *lm.model), o);
  }
};

/// "cache: reused N/M tok, RAM X MiB (B blocks, S snapshots), disk Y MiB" for the stats lines.
inline std::string cache_stats_phrase(const k3::PrefixCache& c, int64_t reused, int64_t n_prompt) {
  const k3::PrefixCacheStats s = c.stats();
  char buf[256];
  std::snprintf(buf, sizeof buf, "cache: reused %lld/%lld tok, RAM %.1f MiB (%llu blocks, %llu snapshots)",
                static_cast<long long>(reused), static_cast<long long>(n_prompt),
                static_cast<double>(s.ram_bytes) / 1048576.0, static_cast<unsigned long long>(s.ram_blocks),
                static_cast<unsigned long long>(s.ram_snapshots));
  std::string r = buf;
  if (!c.options().disk_dir.empty()) {
    std::snprintf(buf, sizeof buf, ", disk %.1f MiB (%llu blocks)", static_cast<double>(s.disk_bytes) / 1048576.0,
                  static_cast<unsigned long long>(s.disk_blocks));
    r += buf;
  }
  return r;
}

}  // namespace k3cli
