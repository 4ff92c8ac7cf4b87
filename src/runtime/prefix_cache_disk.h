// The disk tier of k3::PrefixCache: one file per block, "<key as 16 hex>.k3pc", in one
// directory, within a byte budget (the least recently used files go first).
//
// File: 8-byte magic "K3PCBLK1", u32 little-endian header length, the JSON header
// {"format":"k3-prefix-block","version":1,"fingerprint","key","parent","index","block_tokens",
//  "ids":[B ids],"mla_floats","kda_floats"}, the fp32 payload (MLA rows of every MLA layer in
// layer order, then — when kda_floats > 0 — every KDA layer's S then conv), and a u32 CRC-32
// (zlib) of everything before it. A file whose magic, header, sizes, CRC or fingerprint do not
// match is a miss, reported once per file on stderr, never an error of the request.
#pragma once
#include <cstdint>
#include <filesystem>
#include <list>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace k3 {

/// A block as stored on disk (the payload of PrefixCache::Block).
struct DiskBlock {
  uint64_t key = 0, parent = 0;
  int64_t index = 0;                 ///< block number in its prefix (0 = the first B ids)
  std::vector<int32_t> ids;          ///< [B]
  std::vector<float> mla;            ///< [n_mla_layers, B, row]
  std::vector<float> kda;            ///< [] or the snapshot of every KDA layer (S, conv)
};

class PrefixCacheDisk {
 public:
  /// Opens (creates) `dir` and indexes the *.k3pc files in it (oldest modification first).
  /// Errors: k3::Error "--cache-dir: ..." when it cannot be created or is not a directory.
  PrefixCacheDisk(std::filesystem::path dir, uint64_t budget_bytes, std::string fingerprint,
                  int64_t block_tokens);

  /// Writes `b` (replacing an older file of the same key), then removes the least recently
  /// used files until the directory fits the budget. Errors are reported on stderr once and
  /// the block is simply not kept (the disk tier is a cache).
  void write(const DiskBlock& b);
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

 private:
  std::filesystem::path path_of(uint64_t key) const;
  void reject(uint64_t key, const std::string& why);
  void remove(uint64_t key);

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
};

}  // namespace k3
