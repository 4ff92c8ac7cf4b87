// The ranks of this k3 process: see ranks.h.
#include "ranks.h"

#include <cstdio>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "runtime/model_fingerprint.h"

namespace k3cli {

std::shared_ptr<k3::Comm>& world() {
  static std::shared_ptr<k3::Comm> w = std::make_shared<k3::SingleProcessComm>();
  return w;
}

std::string build_id() {
  std::ifstream f("/proc/self/exe", std::ios::binary);
  if (!f) throw k3::Error("rank check: cannot read /proc/self/exe (the k3 binary) to identify the build");
  uint64_t h = k3::fnv1a64("k3-build", 8);
  std::vector<char> buf(1 << 20);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h = k3::fnv1a64(buf.data(), static_cast<size_t>(f.gcount()), h);
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

void check_ranks(const k3::Checkpoint& ck, const k3::Model& model) {
  k3::Comm& comm = model.comm();
  const int n = comm.size();
  if (n == 1) return;
  if (const std::string why = k3::ranks_disagreement(ck, model, build_id()); !why.empty()) throw GroupError(why);
  const k3::ModelShard& s = model.shard();
  constexpr size_t kF = 11;  // fields per rank
  const uint64_t mine[kF] = {static_cast<uint64_t>(s.experts.begin),
                             static_cast<uint64_t>(s.experts.end),
                             static_cast<uint64_t>(s.vocab.begin),
                             static_cast<uint64_t>(s.vocab.end),
                             s.trunk_bytes,
                             s.expert_bytes,
                             s.lm_head_bytes,
                             static_cast<uint64_t>(s.kda_heads.begin),
                             static_cast<uint64_t>(s.kda_heads.end),
                             static_cast<uint64_t>(s.mla_heads.begin),
                             static_cast<uint64_t>(s.mla_heads.end)};
  std::vector<uint64_t> all(static_cast<size_t>(n) * kF);
  comm.allgatherv(mine, std::vector<int64_t>(static_cast<size_t>(n), sizeof mine), all.data());
  if (comm.rank() != 0) return;
  const k3::ModelConfig& c = model.config();
  std::fprintf(stderr,
               "k3: %d ranks over %s; each holds its trunk share (its KDA/MLA heads, its rows of the output "
               "projections, the replicated rest), its experts and lm_head rows:\n",
               n, comm.transport().c_str());
  using ull = unsigned long long;
  for (int r = 0; r < n; ++r) {
    const uint64_t* a = &all[static_cast<size_t>(r) * kF];
    std::fprintf(stderr,
                 "k3:   rank %d: experts [%llu, %llu) of %d, vocab rows [%llu, %llu) of %d, KDA heads [%llu, %llu) "
                 "of %d, MLA heads [%llu, %llu) of %d; weights %.3f MB (trunk %.3f + experts %.3f + lm_head %.3f)\n",
                 r, static_cast<ull>(a[0]), static_cast<ull>(a[1]), c.num_experts, static_cast<ull>(a[2]),
                 static_cast<ull>(a[3]), c.vocab_size, static_cast<ull>(a[7]), static_cast<ull>(a[8]), c.kda_num_heads,
                 static_cast<ull>(a[9]), static_cast<ull>(a[10]), c.num_attention_heads,
                 static_cast<double>(a[4] + a[5] + a[6]) / 1e6, static_cast<double>(a[4]) / 1e6,
                 static_cast<double>(a[5]) / 1e6, static_cast<double>(a[6]) / 1e6);
  }
}

void check_same_input(std::initializer_list<std::span<const int32_t>> parts, const std::string& what) {
  k3::Comm& c = *world();
  if (c.size() == 1) return;
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64 over the little-endian bytes of sizes and ids
  auto mix = [&h](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) {
      h ^= (v >> (8 * i)) & 0xffu;
      h *= 1099511628211ull;
    }
  };
  for (const std::span<const int32_t> p : parts) {
    mix(p.size(), 8);
    for (const int32_t id : p) mix(static_cast<uint32_t>(id), 4);
  }
  std::vector<uint64_t> all(static_cast<size_t>(c.size()));
  const std::vector<int64_t> counts(static_cast<size_t>(c.size()), static_cast<int64_t>(sizeof(uint64_t)));
  c.allgatherv(&h, counts, all.data());
  std::string differ;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  if (!differ.empty())
    throw GroupError("rank(s) " + differ + " were given other " + what +
                     " than rank 0 (each rank reads its own input files and tokenizer: give every rank the same "
                     "files and flags)");
}

void agree_ok(const std::string& error) {
  k3::Comm& c = *world();
  if (c.size() == 1) {
    if (!error.empty()) throw k3::Error(error);
    return;
  }
  const int64_t mine = static_cast<int64_t>(error.size());
  std::vector<int64_t> lens(static_cast<size_t>(c.size()));
  c.allgatherv(&mine, std::vector<int64_t>(static_cast<size_t>(c.size()), 8), lens.data());
  int64_t total = 0;
  for (const int64_t n : lens) total += n;
  if (total == 0) return;
  std::string all(static_cast<size_t>(total), '\0');
  c.allgatherv(error.data(), lens, all.data());
  std::string why;
  int64_t off = 0;
  for (size_t r = 0; r < lens.size(); ++r) {
    if (lens[r] > 0)
      why += (why.empty() ? "" : "; ") + (c.size() > 1 ? "rank " + std::to_string(r) + ": " : std::string()) +
             all.substr(static_cast<size_t>(off), static_cast<size_t>(lens[r]));
    off += lens[r];
  }
  throw GroupError(why);
}

void share_line(bool& got, bool& flag, std::string& line) {
  k3::Comm& c = *world();
  if (c.size() == 1) return;
  uint64_t head[3] = {got ? 1u : 0u, flag ? 1u : 0u, line.size()};
  c.broadcast(head, sizeof head, 0);
  got = head[0] != 0;
  flag = head[1] != 0;
  line.resize(head[2]);
  c.broadcast(line.data(), static_cast<int64_t>(line.size()), 0);
}

void refuse_ranks(const std::string& what) {
  if (world()->size() > 1)
    throw GroupError(what + " runs as one process in this version (found " + std::to_string(world()->size()) +
                     " ranks); serving and interactive use across ranks: docs/distributed.md");
}

void print_comm_counters(const char* who) {
  const k3::Comm& c = *world();
  if (c.size() == 1 || c.rank() != 0) return;
  const k3::CommCounters& k = c.counters();
  std::fprintf(stderr, "%s: rank 0 of %d: %llu collectives, %.3f MB sent, %.3f MB received\n", who, c.size(),
               static_cast<unsigned long long>(k.collectives), static_cast<double>(k.bytes_sent) / 1e6,
               static_cast<double>(k.bytes_received) / 1e6);
}

}  // namespace k3cli
