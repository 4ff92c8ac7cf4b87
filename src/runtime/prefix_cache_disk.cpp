// PrefixCacheDisk: see prefix_cache_disk.h.
#include "runtime/prefix_cache_disk.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <climits>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_depth.h"
#include "model/state_file.h"

namespace k3 {

namespace {

constexpr int kVersion = 2;
constexpr uint64_t kMaxHeader = 1u << 20;

bool parse_key(const std::string& stem, uint64_t* key) {
  if (stem.size() != 16) return false;
  uint64_t v = 0;
  for (char c : stem) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  if (key) *key = v;
  return true;
}

}  // namespace

PrefixCacheDisk::PrefixCacheDisk(std::filesystem::path dir, uint64_t budget_bytes, std::string fingerprint,
                                 int64_t block_tokens, PrefixCacheLog log)
    : dir_(std::move(dir)),
      budget_(budget_bytes),
      fingerprint_(std::move(fingerprint)),
      block_tokens_(block_tokens),
      log_(std::move(log)) {
  // The directory is trusted (a file there whose CRC matches is served), so it must be this
  // user's and not writable by everyone; one process at a time uses it.
  check_private_dir(dir_, "--cache-dir");
  lock_ = std::make_unique<DirLock>(dir_, "--cache-dir");
  std::error_code ec;
  struct Found {
    std::filesystem::file_time_type t;
    uint64_t key, bytes;
  };
  std::vector<Found> found;
  for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
    // ".<key>.k3pc.<random>": the temporary file of a write that never finished (the lock says
    // that no other process is writing here).
    const std::string fn = e.path().filename().string();
    if (fn.size() > 23 && fn[0] == '.' && fn.compare(17, 6, ".k3pc.") == 0 && parse_key(fn.substr(1, 16), nullptr)) {
      std::error_code rec;
      std::filesystem::remove(e.path(), rec);
      continue;
    }
    if (!e.is_regular_file(ec) || e.path().extension() != ".k3pc") continue;
    uint64_t key = 0;
    if (!parse_key(e.path().stem().string(), &key)) continue;
    const uintmax_t sz = e.file_size(ec);
    if (ec) continue;
    found.push_back({e.last_write_time(ec), key, static_cast<uint64_t>(sz)});
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.t < b.t; });
  for (const Found& f : found) {
    lru_.push_back(f.key);
    files_[f.key] = {f.bytes, std::prev(lru_.end())};
    bytes_ += f.bytes;
  }
}

std::filesystem::path PrefixCacheDisk::path_of(uint64_t key) const {
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.k3pc", static_cast<unsigned long long>(key));
  return dir_ / name;
}

void PrefixCacheDisk::remove(uint64_t key) {
  auto it = files_.find(key);
  if (it == files_.end()) return;
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  files_.erase(it);
  std::error_code ec;
  std::filesystem::remove(path_of(key), ec);
}

void PrefixCacheDisk::report(const std::string& line) const {
  if (log_) log_(line);
  else std::fprintf(stderr, "%s\n", line.c_str());
}

void PrefixCacheDisk::reject(uint64_t key, const std::string& why) {
  ++rejected_;
  report("k3: prefix cache: ignoring '" + path_of(key).string() + "': " + why + " (a miss; the file is removed)");
  remove(key);
}

bool PrefixCacheDisk::write(const DiskBlock& b) {
  nlohmann::json h;
  h["format"] = "k3-prefix-block";
  h["version"] = kVersion;
  h["fingerprint"] = fingerprint_;
  h["key"] = b.key;
  h["parent"] = b.parent;
  h["index"] = b.index;
  h["block_tokens"] = block_tokens_;
  h["ids"] = b.ids;
  h["mla_floats"] = b.mla.size();
  h["kda_floats"] = b.kda.size();
  const std::string hs = h.dump();
  const uint64_t size = state_file_bytes(hs.size(), (b.mla.size() + b.kda.size()) * 4);
  if (size > budget_) return false;  // never fits
  remove(b.key);
  while (bytes_ + size > budget_ && !lru_.empty()) remove(lru_.front());
  const std::span<const std::byte> payload[] = {std::as_bytes(std::span<const float>(b.mla)),
                                                std::as_bytes(std::span<const float>(b.kda))};
  // A fresh temporary file renamed onto the block's name. No fsync: a file torn by a crash fails
  // its CRC and is a miss.
  try {
    write_state_file(path_of(b.key), kPrefixBlockFile, hs, payload, "prefix cache", /*durable=*/false);
  } catch (const Error& e) {
    if (write_failures_++ == 0)
      report(std::string("k3: prefix cache: ") + e.what() +
             "; blocks that cannot be written are not kept on disk (reported once, counted in the disk write "
             "failures)");
    return false;
  }
  lru_.push_back(b.key);
  files_[b.key] = {size, std::prev(lru_.end())};
  bytes_ += size;
  return true;
}

std::optional<DiskBlock> PrefixCacheDisk::read(uint64_t key, uint64_t expect_mla, uint64_t expect_kda) {
  auto it = files_.find(key);
  if (it == files_.end()) return std::nullopt;
  const uint64_t max_bytes =
      state_file_bytes(kMaxHeader, 0) + static_cast<uint64_t>(block_tokens_) * 16 + (expect_mla + expect_kda) * 4;
  std::string buf;
  {
    std::ifstream f(path_of(key), std::ios::binary);
    if (!f) {
      reject(key, "cannot open");
      return std::nullopt;
    }
    f.seekg(0, std::ios::end);
    const std::streamoff n = f.tellg();
    if (n < 0 || static_cast<uint64_t>(n) > max_bytes) {
      reject(key, "size " + std::to_string(n) + " bytes is not that of a block of this model");
      return std::nullopt;
    }
    f.seekg(0);
    buf.resize(static_cast<size_t>(n));
    if (!f.read(buf.data(), n)) {
      reject(key, "read failed");
      return std::nullopt;
    }
  }
  StateFileView v;
  try {
    v = parse_state_file(std::span(reinterpret_cast<const uint8_t*>(buf.data()), buf.size()), kPrefixBlockFile,
                         path_of(key).string(), "prefix cache block", kMaxHeader);
  } catch (const Error& e) {
    reject(key, e.what());
    return std::nullopt;
  }
  const std::string_view header = v.header;
  if (const JsonDepthScan scan = scan_json_depth(header); scan.exceeded) {
    reject(key, "header: " + json_depth_message(scan));
    return std::nullopt;
  }
  DiskBlock b;
  try {
    const nlohmann::json h = nlohmann::json::parse(header);
    if (h.at("format") != "k3-prefix-block" || h.at("version") != kVersion) {
      reject(key, "not a k3-prefix-block version " + std::to_string(kVersion));
      return std::nullopt;
    }
    if (h.at("fingerprint") != fingerprint_) {
      reject(key, "written for another model (fingerprint " + h.at("fingerprint").get<std::string>() + ", this model " +
                      fingerprint_ + ")");
      return std::nullopt;
    }
    for (const char* k : {"key", "parent", "index", "block_tokens", "mla_floats", "kda_floats"})
      if (!h.at(k).is_number_integer()) {
        reject(key, std::string("header field ") + k + " is not an integer");
        return std::nullopt;
      }
    for (const auto& id : h.at("ids"))
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        reject(key, "header ids hold a value that is not a token id");
        return std::nullopt;
      }
    b.key = h.at("key").get<uint64_t>();
    b.parent = h.at("parent").get<uint64_t>();
    b.index = h.at("index").get<int64_t>();
    b.ids = h.at("ids").get<std::vector<int32_t>>();
    const uint64_t nm = h.at("mla_floats").get<uint64_t>(), nk = h.at("kda_floats").get<uint64_t>();
    if (b.key != key || h.at("block_tokens").get<int64_t>() != block_tokens_ ||
        b.ids.size() != static_cast<size_t>(block_tokens_) || nm != expect_mla || (nk != 0 && nk != expect_kda) ||
        (nm + nk) * 4 != v.payload.size()) {
      reject(key, "header does not match this model's block layout");
      return std::nullopt;
    }
    b.mla.resize(nm);
    b.kda.resize(nk);
    if (nm > 0) std::memcpy(b.mla.data(), v.payload.data(), nm * 4);
    if (nk > 0) std::memcpy(b.kda.data(), v.payload.data() + nm * 4, nk * 4);
  } catch (const nlohmann::json::exception& e) {
    reject(key, std::string("malformed header: ") + e.what());
    return std::nullopt;
  }
  lru_.splice(lru_.end(), lru_, it->second.lru);  // most recently used
  return b;
}

void PrefixCacheDisk::clear() {
  while (!lru_.empty()) remove(lru_.front());
}

}  // namespace k3
