// model_fingerprint: see model_fingerprint.h.
#include "runtime/model_fingerprint.h"

#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"

#include "core/read_file.h"
#include "io/tensor_table.h"
#include "kernels/exec_config.h"

namespace k3 {

uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

namespace {

/// Where a tensor's sampled bytes are read under N ranks: -1 on every rank (replicated tensors),
/// else the rank holding the routed expert the tensor belongs to.
int sample_owner(const ModelConfig& c, const ModelShard& sh, const TensorView& t) {
  if (sh.ranks == 1) return -1;
  const auto hit = match_tensor_name(c, text_tensor_name(t.name));
  if (!hit || hit->expert < 0) return -1;
  return split_owner(c.num_experts, sh.ranks, hit->expert);
}

/// FNV-1a of the first, middle and last 64 bytes of `t` (a tensor with data), each sample
/// hashed from the offset basis.
std::array<uint64_t, 3> sample_digests(const TensorView& t) {
  const uint64_t n = t.nbytes < 64 ? t.nbytes : 64;
  return {fnv1a64(t.data, n), fnv1a64(t.data + (t.nbytes - n) / 2, n), fnv1a64(t.data + (t.nbytes - n), n)};
}

bool has_samples(const TensorView& t) { return t.data != nullptr && t.nbytes > 0; }

std::string exec_text(const Model& model) {
  const ModelOptions& o = model.options();
  const ExecContext x = resolve_exec_config(o.exec);  // resolved by the model: every field is set
  return std::string("isa=") + isa_name(x.isa) + " kernels=" + model_kernels_name(x.kernels) +
         " mxfp4=" + mxfp4_path_name(x.mxfp4) + " numerics=" + numerics_name(x.numerics) +
         " prefill_chunk=" + std::to_string(o.prefill_chunk) + " trunk=" +
         (!o.trunk_quant                    ? "bf16"
          : *o.trunk_quant == QuantKind::Q8 ? "q8"
                                            : "q4");
}

std::string hex16(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

std::string model_fingerprint(const Checkpoint& ck, const Model& model) {
  const ModelConfig& c = ck.config();
  const ModelShard& sh = model.shard();
  const std::vector<TensorView>& ts = ck.tensors();
  // Each sampled tensor's three digests; under N ranks a routed expert's are computed by the
  // rank holding it (no rank reads another's experts) and all-gathered in tensor order.
  std::vector<std::array<uint64_t, 3>> dig(ts.size());
  std::vector<int> owner(ts.size(), -1);
  for (size_t i = 0; i < ts.size(); ++i) {
    if (!has_samples(ts[i])) continue;
    owner[i] = sample_owner(c, sh, ts[i]);
    if (owner[i] < 0 || owner[i] == sh.rank) dig[i] = sample_digests(ts[i]);
  }
  if (sh.ranks > 1) {
    std::vector<int64_t> counts(static_cast<size_t>(sh.ranks), 0);
    std::vector<uint64_t> mine;
    for (size_t i = 0; i < ts.size(); ++i)
      if (owner[i] >= 0) {
        counts[owner[i]] += 3 * static_cast<int64_t>(sizeof(uint64_t));
        if (owner[i] == sh.rank) mine.insert(mine.end(), dig[i].begin(), dig[i].end());
      }
    int64_t total = 0;
    for (int64_t n : counts) total += n;
    std::vector<uint64_t> all(static_cast<size_t>(total) / sizeof(uint64_t));
    model.comm().allgatherv(mine.data(), counts, all.data());
    std::vector<int64_t> cursor(static_cast<size_t>(sh.ranks), 0);
    for (int r = 1; r < sh.ranks; ++r) cursor[r] = cursor[r - 1] + counts[r - 1] / 8;
    for (size_t i = 0; i < ts.size(); ++i)
      if (owner[i] >= 0) {
        for (int j = 0; j < 3; ++j) dig[i][j] = all[static_cast<size_t>(cursor[owner[i]]++)];
      }
  }
  uint64_t h = fnv1a64("k3-model-fingerprint-2", 22);
  auto mix = [&](const std::string& s) { h = fnv1a64(s.data(), s.size() + 1, h); };  // NUL-separated
  mix(read_file_bounded(ck.dir() / "config.json", "model fingerprint: config.json"));
  for (size_t i = 0; i < ts.size(); ++i) {
    const TensorView& t = ts[i];
    mix(t.name);
    std::string shape = std::to_string(static_cast<int>(t.dtype));
    for (int64_t d : t.shape) shape += "," + std::to_string(d);
    mix(shape);
    if (has_samples(t)) h = fnv1a64(dig[i].data(), sizeof dig[i], h);
  }
  mix(exec_text(model));
  return hex16(h);
}

void check_ranks_agree(const Checkpoint& ck, const Model& model, const std::string& build_id) {
  const std::string why = ranks_disagreement(ck, model, build_id);
  if (!why.empty()) throw Error(why);
}

std::string ranks_disagreement(const Checkpoint& ck, const Model& model, const std::string& build_id) {
  Comm& comm = model.comm();
  const int n = comm.size();
  if (n == 1) return "";
  const ModelConfig& c = ck.config();
  const ModelShard& sh = model.shard();
  // What each rank computes alone: config.json, the tensor headers, samples of the tensors
  // every rank reads (not the routed experts), the execution config, the build.
  enum Part { kBuild, kConfig, kHeaders, kBytes, kExec, kParts };
  std::array<uint64_t, kParts> mine{};
  mine[kBuild] = fnv1a64(build_id.data(), build_id.size());
  const std::string cfg = read_file_bounded(ck.dir() / "config.json", "rank check: config.json");
  mine[kConfig] = fnv1a64(cfg.data(), cfg.size());
  uint64_t hh = fnv1a64("headers", 7), hb = fnv1a64("bytes", 5);
  for (const TensorView& t : ck.tensors()) {
    std::string head = t.name + ":" + std::to_string(static_cast<int>(t.dtype));
    for (int64_t d : t.shape) head += "," + std::to_string(d);
    hh = fnv1a64(head.data(), head.size() + 1, hh);
    if (has_samples(t) && sample_owner(c, sh, t) < 0) {
      const std::array<uint64_t, 3> d = sample_digests(t);
      hb = fnv1a64(d.data(), sizeof d, hb);
    }
  }
  mine[kHeaders] = hh;
  mine[kBytes] = hb;
  const std::string ex = exec_text(model);
  mine[kExec] = fnv1a64(ex.data(), ex.size());
  std::vector<uint64_t> all(static_cast<size_t>(n) * kParts);
  const std::vector<int64_t> counts(static_cast<size_t>(n), static_cast<int64_t>(sizeof mine));
  comm.allgatherv(mine.data(), counts, all.data());
  // The checkpoint directories, for the message.
  const std::string dir = ck.dir().string();
  std::vector<int64_t> lens(static_cast<size_t>(n));
  const int64_t len = static_cast<int64_t>(dir.size());
  comm.allgatherv(&len, std::vector<int64_t>(static_cast<size_t>(n), sizeof(int64_t)), lens.data());
  int64_t total = 0;
  for (int64_t l : lens) total += l;
  std::string dirs(static_cast<size_t>(total), '\0');
  comm.allgatherv(dir.data(), lens, dirs.data());
  std::string why;
  int64_t off = lens[0];
  for (int r = 1; r < n; ++r) {
    const uint64_t* a = &all[0];
    const uint64_t* b = &all[static_cast<size_t>(r) * kParts];
    std::vector<std::string> diff;
    if (a[kBuild] != b[kBuild])
      diff.push_back("the k3 binary (build " + hex16(b[kBuild]) + " vs " + hex16(a[kBuild]) + ")");
    if (a[kConfig] != b[kConfig]) diff.push_back("config.json");
    if (a[kHeaders] != b[kHeaders]) diff.push_back("the tensors' names, dtypes or shapes");
    if (a[kBytes] != b[kBytes]) diff.push_back("the bytes of the replicated tensors");
    if (a[kExec] != b[kExec]) diff.push_back("the execution config (ISA, kernels, numerics, MXFP4 path, trunk type)");
    const std::string dir_r = dirs.substr(static_cast<size_t>(off), static_cast<size_t>(lens[r]));
    off += lens[r];
    if (diff.empty()) continue;
    std::string d;
    for (size_t i = 0; i < diff.size(); ++i) d += (i ? ", " : "") + diff[i];
    why += (why.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " ('" + dir_r +
           "') differs from rank 0 ('" + dirs.substr(0, static_cast<size_t>(lens[0])) + "') in " + d;
  }
  return why.empty() ? why : "the ranks did not open the same model, so they refuse to start: " + why;
}

}  // namespace k3
