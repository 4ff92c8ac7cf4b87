// The disk tier of k3::PrefixCache: one file per block, "<key as 16 hex>.k3pc", in one
// directory, within a byte budget (the least recently used files go first).
//
// File: the container of model/state_file.h, magic "K3PCBLK2", the JSON header
// {"format":"k3-prefix-block","version":2,"fingerprint","key","parent","index","block_tokens",
//  "ids":[B ids],"mla_floats","kda_floats"}, the fp32 payload (MLA rows of every MLA layer in
// layer order, then — when kda_floats > 0 — the KDA snapshot: SequenceState::snapshot's floats).
// A file whose magic (e.g. a "K3PCBLK1" file of the older layout), header, sizes, CRC or
// fingerprint do not match is a miss, reported once per file (PrefixCacheLog), counted in
// rejected(), and removed; never an error of the request.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/atomic_file.h"

namespace k3 {

/// A block as stored on disk (the payload of PrefixCache::Block).
struct DiskBlock {
  uint64_t key = 0, parent = 0;
  int64_t index = 0;         ///< block number in its prefix (0 = the first B ids)
  std::vector<int32_t> ids;  ///< [B]
  std::vector<float> mla;    ///< [n_mla_layers, B, row]
  std::vector<float> kda;    ///< [] or the snapshot of every KDA layer (S, conv)
};

/// Where the disk tier's reports go: one line each (a file refused, a write that failed),
/// starting "k3: prefix cache: ", without a newline. Empty: stderr.
using PrefixCacheLog = std::function<void(const std::string& line)>;

class PrefixCacheDisk {
 public:
  /// Opens (creates, mode 0700) `dir`, locks it for this object's life (core/atomic_file.h
  /// DirLock), removes the temporary files of unfinished writes and indexes the *.k3pc files
  /// (oldest modification first). Errors: k3::Error "--cache-dir: ..." when it cannot be created,
  /// is not a directory, is not this user's or is writable by every user (check_private_dir), or
  /// is locked by another process.
  PrefixCacheDisk(std::filesystem::path dir, uint64_t budget_bytes, std::string fingerprint, int64_t block_tokens,
                  PrefixCacheLog log = {});

  /// Writes `b` (replacing an older file of the same key) through a temporary file renamed
  /// into place, after removing the least recently used files until the directory fits the
  /// budget. A failed write (disk full) is counted in write_failures(), reported (the log) the
  /// first time only, and the block is simply not kept (the disk tier is a cache).
  /// Returns whether the block is now on disk.
  bool write(const DiskBlock& b);
  /// Reads block `key` when a valid file of this model holds it; nullopt otherwise (a bad file
  /// is reported once and removed). `expect_mla` / `expect_kda_max` bound the payload sizes.
  std::optional<DiskBlock> read(uint64_t key, uint64_t expect_mla, uint64_t expect_kda);
  bool contains(uint64_t key) const { return files_.count(key) != 0; }
  /// Deletes every indexed file.
  void clear();
  /// Reports `key`'s file once (why) and removes it: a file that parsed but is not usable.
  void discard(uint64_t key, const std::string& why) { reject(key, why); }

  uint64_t bytes() const { return bytes_; }
  uint64_t files() const { return files_.size(); }
  uint64_t rejected() const { return rejected_; }
  uint64_t write_failures() const { return write_failures_; }

 private:
  std::filesystem::path path_of(uint64_t key) const;
  void reject(uint64_t key, const std::string& why);
  void remove(uint64_t key);
  void report(const std::string& line) const;

  std::filesystem::path dir_;
  uint64_t budget_;
  std::string fingerprint_;
  int64_t block_tokens_;
  struct File {
    uint64_t bytes = 0;
    std::list<uint64_t>::iterator lru;  ///< position in lru_ (front = least recently used)
  };
  std::unordered_map<uint64_t, File> files_;
  std::list<uint64_t> lru_;
  uint64_t bytes_ = 0;
  uint64_t rejected_ = 0;
  uint64_t write_failures_ = 0;
  std::unique_ptr<DirLock> lock_;
  PrefixCacheLog log_;
};

}  // namespace k3
