// `k3 logits`: teacher-forced logits of a token-id sequence, so that any other implementation can
// be compared with k3.cpp. Writes [n_tokens, vocab] float32 .npy (--out) or prints the top-k per
// position; --dump DIR writes the named intermediates (model/dump.h); --generate N also prints a
// greedy N-token continuation (prefill, then one decode step per token).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "model/dump.h"
#include "model/k3_model.h"

namespace {

std::vector<int32_t> parse_ids(const std::string& text, const std::string& origin) {
  std::vector<int32_t> ids;
  std::string tok;
  auto flush = [&] {
    if (tok.empty()) return;
    size_t pos = 0;
    long long v = 0;
    try {
      v = std::stoll(tok, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    if (pos != tok.size() || v < 0 || v > INT32_MAX)
      throw k3::Error(origin + ": '" + tok + "' is not a token id (expected a non-negative integer)");
    ids.push_back(static_cast<int32_t>(v));
    tok.clear();
  };
  for (char c : text) {
    if (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r')
      flush();
    else
      tok += c;
  }
  flush();
  if (ids.empty()) throw k3::Error(origin + ": no token ids");
  return ids;
}

/// Index of the largest value (lowest index on ties; NaN never wins unless all are NaN).
int32_t argmax(const float* x, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best] || (x[best] != x[best] && x[i] == x[i])) best = static_cast<int32_t>(i);
  return best;
}

struct Options {
  std::string model, ids, ids_file, out, dump;
  int top_k = 5;
  int generate = 0;
};

void run(const Options& o) {
  std::vector<int32_t> ids;
  if (!o.ids.empty() == !o.ids_file.empty()) throw k3::Error("logits: give exactly one of --ids or --ids-file");
  if (!o.ids.empty()) {
    ids = parse_ids(o.ids, "--ids");
  } else {
    std::ifstream f(o.ids_file);
    if (!f) throw k3::Error("--ids-file: cannot open '" + o.ids_file + "'");
    std::stringstream ss;
    ss << f.rdbuf();
    ids = parse_ids(ss.str(), "--ids-file '" + o.ids_file + "'");
  }
  if (o.top_k < 1) throw k3::Error("--top-k: expected >= 1, found " + std::to_string(o.top_k));
  if (o.generate < 0) throw k3::Error("--generate: expected >= 0, found " + std::to_string(o.generate));
  auto ck = k3::Checkpoint::open(o.model);
  k3::Model model(*ck);
  const int64_t V = model.config().vocab_size, T = static_cast<int64_t>(ids.size());
  k3::SequenceState seq = model.new_sequence();
  std::unique_ptr<k3::DumpSink> dump;
  if (!o.dump.empty()) dump = std::make_unique<k3::DumpSink>(o.dump);
  std::vector<float> logits = model.forward(seq, ids, /*all_logits=*/true, dump.get());
  if (dump) dump->finish();

  if (!o.out.empty()) {
    k3::write_npy_f32(o.out, {T, V}, logits.data());
  } else {
    const int k = static_cast<int>(std::min<int64_t>(o.top_k, V));
    std::vector<int32_t> idx(static_cast<size_t>(V));
    for (int64_t t = 0; t < T; ++t) {
      const float* row = logits.data() + t * V;
      std::iota(idx.begin(), idx.end(), 0);
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
        return row[a] != row[b] ? row[a] > row[b] : a < b;
      });
      std::printf("pos %lld (id %d):", static_cast<long long>(t), ids[t]);
      for (int i = 0; i < k; ++i) std::printf(" %d=%.6f", idx[i], row[idx[i]]);
      std::printf("\n");
    }
  }
  if (o.generate > 0) {
    std::vector<int32_t> gen;
    int32_t next = argmax(logits.data() + (T - 1) * V, V);
    for (int i = 0; i < o.generate; ++i) {
      gen.push_back(next);
      if (i + 1 == o.generate) break;
      const int32_t one[1] = {next};
      std::vector<float> l = model.forward(seq, one, /*all_logits=*/false);
      next = argmax(l.data(), V);
    }
    std::printf("generated:");
    for (size_t i = 0; i < gen.size(); ++i) std::printf("%s%d", i ? "," : " ", gen[i]);
    std::printf("\n");
  }
}

const k3cli::Registrar kReg(
    "logits", "teacher-forced logits for a token-id sequence (.npy or top-k per position)",
    [](CLI::App* sub) {
      auto o = std::make_shared<Options>();
      sub->add_option("-m,--model", o->model, "checkpoint directory")->required();
      sub->add_option("--ids", o->ids, "comma-separated token ids, e.g. 1,2,3");
      sub->add_option("--ids-file", o->ids_file, "file of token ids (comma/whitespace separated)");
      sub->add_option("--out", o->out, "write logits as .npy float32 [n_tokens, vocab]");
      sub->add_option("--top-k", o->top_k, "print the top-k logits per position (default 5)");
      sub->add_option("--dump", o->dump, "write named intermediates (.npy + manifest.json) to DIR");
      sub->add_option("--generate", o->generate,
                      "also print a greedy continuation of N tokens (prefill + decode steps)");
      sub->callback([o] { run(*o); });
    });

}  // namespace
