// `k3 logits`: teacher-forced logits of a token-id sequence, so that any other implementation can
// be compared with k3.cpp. Writes [n_tokens, vocab] float32 .npy (--out) or prints the top-k per
// position; --dump DIR writes the named intermediates (model/dump.h); --generate N also prints a
// greedy N-token continuation (prefill, then one decode step per token). Rows are streamed in the
// model's prefill pieces (O(piece x vocab) memory); a NaN/Inf row is an error naming its position.
// --image FILE (repeatable) with -p TEXT: one user turn of the K3 chat format holding the images
// then the text (runtime/image_prompt.h); the image embeddings of the vision tower are written at
// the <|media_pad|> positions; --ids-out writes the rendered ids.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "cache_type_flag.h"
#include "command.h"
#include "exec_flags.h"
#include "core/error.h"
#include "core/read_file.h"
#include "flag_checks.h"
#include "ranks.h"
#include "runtime/image_prompt.h"
#include "runtime/nonfinite.h"
#include "tokenizer/tokenizer.h"
#include "vision/image_preprocess.h"
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
    if (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r') flush();
    else tok += c;
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
  std::string model, ids, ids_file, out, dump, prompt, ids_out;
  k3cli::CacheTypeFlag cache_type;  ///< --cache-type: the MLA cache rows
  std::vector<std::string> images;
  bool no_think = false;
  int top_k = 5;
  int generate = 0;
  k3cli::InputLimit input_limit;
  k3cli::NumericsFlag numerics;  ///< default exact (the 1e-5 contract)
};

// A .npy float32 [rows, cols] file written one row block at a time (the header first).
class NpyRowWriter {
 public:
  NpyRowWriter(const std::string& path, int64_t rows, int64_t cols)
      : path_(path), f_(path, std::ios::binary | std::ios::trunc) {
    if (!f_) throw k3::Error("--out: cannot open '" + path + "' for writing");
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                         std::to_string(cols) + "), }";
    const size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header += '\n';
    const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
    f_.write(magic, 8);
    const uint16_t hl = static_cast<uint16_t>(header.size());
    const char len[2] = {static_cast<char>(hl & 0xFF), static_cast<char>(hl >> 8)};
    f_.write(len, 2);
    f_.write(header.data(), static_cast<std::streamsize>(header.size()));
    check();
  }
  void write(const float* data, int64_t n) {
    f_.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n * 4));
    check();
  }
  void finish() {
    f_.close();
    if (!f_) throw k3::Error("--out: write to '" + path_ + "' failed");
  }
  /// Removes the partial file (after an error).
  void discard() {
    f_.close();
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }

 private:
  void check() {
    if (!f_) throw k3::Error("--out: write to '" + path_ + "' failed");
  }
  std::string path_;
  std::ofstream f_;
};

// Error for a row of logits holding a NaN/Inf (position t of the ids), with the first non-finite
// intermediate of a replay of ids[0..t] (runtime/nonfinite.h).
[[noreturn]] void nonfinite_row(const k3::Model& model, const std::vector<int32_t>& ids, int64_t t, const float* row,
                                int64_t n_vocab, const char* what) {
  const int64_t bad = k3::first_nonfinite(std::span<const float>(row, static_cast<size_t>(n_vocab)));
  throw k3::Error(std::string("logits: ") + what + " at position " + std::to_string(t) + " (id " +
                  std::to_string(ids[static_cast<size_t>(t)]) + ") is not finite: logit of id " + std::to_string(bad) +
                  " = " + std::to_string(row[bad]) + "; " +
                  k3::locate_nonfinite(model, std::span<const int32_t>(ids.data(), static_cast<size_t>(t + 1))));
}

void run(const Options& o) {
  std::vector<int32_t> ids;
  const bool chat = !o.images.empty() || !o.prompt.empty();
  if (chat && (!o.ids.empty() || !o.ids_file.empty()))
    throw k3::Error("logits: --image/-p render a chat turn; give them or --ids/--ids-file, not both");
  if (chat && o.prompt.empty()) throw k3::Error("logits: --image needs -p TEXT (the user's text after the images)");
  if (!chat && !o.ids.empty() == !o.ids_file.empty())
    throw k3::Error("logits: give exactly one of --ids, --ids-file or -p TEXT [--image FILE]");
  if (chat) {
    // rendered after the model is opened (the tokenizer and the tower come with it)
  } else if (!o.ids.empty()) {
    ids = parse_ids(o.ids, "--ids");
  } else {
    ids = parse_ids(k3::read_file_bounded(o.ids_file, "--ids-file", o.input_limit.limits()),
                    "--ids-file '" + o.ids_file + "'");
  }
  if (o.top_k < 1) throw k3::Error("--top-k: expected >= 1, found " + std::to_string(o.top_k));
  if (o.generate < 0) throw k3::Error("--generate: expected >= 0, found " + std::to_string(o.generate));
  // Under N ranks (ranks.h) every rank runs this with the same flags; rank 0 writes --out.
  if (!o.dump.empty()) k3cli::refuse_ranks("k3 logits --dump");
  if (!o.images.empty()) k3cli::refuse_ranks("k3 logits --image");
  auto ck = k3::Checkpoint::open(o.model);
  // `k3 logits` is exact by default (numerics 'exact': fp32 activations, the fp64 reference's
  // 1e-5 contract); --numerics / K3_NUMERICS select another mode, K3_MXFP4 the expert path.
  k3::ModelOptions mo;
  mo.exec = o.numerics.exec(k3::Numerics::Exact);
  mo.comm = k3cli::world();
  mo.mla_cache = o.cache_type.type();
  k3::Model model(*ck, mo);
  k3cli::check_ranks(*ck, model);
  k3::ImagePrompt ip;
  if (chat) {
    if (!o.images.empty() && !ck->config().vision) k3::refuse_image_without_tower("--image '" + o.images[0] + "'");
    const k3::Tokenizer tok = k3::Tokenizer::load(o.model);
    std::vector<k3::vision::ImagePatches> patches;
    std::unique_ptr<k3::vision::VisionTower> tower;
    nlohmann::ordered_json content = nlohmann::ordered_json::array();
    if (!o.images.empty()) {
      const auto cfg = k3::vision::ImagePreprocessConfig::for_model_dir(o.model);
      for (const std::string& f : o.images) {
        patches.push_back(k3::vision::preprocess_image_file(f, cfg, k3::vision::ImageLimits{}));
        content.push_back({{"type", "image_url"}, {"image_url", {{"url", f}}}});
      }
      tower = std::make_unique<k3::vision::VisionTower>(*ck);
    }
    content.push_back({{"type", "text"}, {"text", o.prompt}});
    const nlohmann::ordered_json messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", content}}});
    k3::ChatOptions copt;
    copt.thinking = !o.no_think;
    ip = k3::build_image_prompt(tok, tower.get(), model.config().hidden_size, messages, copt, patches);
    ids = ip.ids;
    ip.hidden = model.config().hidden_size;
    if (!o.ids_out.empty()) {
      std::ofstream f(o.ids_out);
      for (size_t i = 0; i < ids.size(); ++i) f << (i ? "," : "") << ids[i];
      f << "\n";
      if (!f) throw k3::Error("--ids-out: cannot write '" + o.ids_out + "'");
    }
  }
  k3cli::check_same_input({ids}, "ids");
  const int64_t n_vocab = model.config().vocab_size, T = static_cast<int64_t>(ids.size());
  for (int64_t t = 0; t < T; ++t)
    if (ids[static_cast<size_t>(t)] >= n_vocab)
      throw k3::Error(std::string(o.ids.empty() ? "--ids-file" : "--ids") + ": id " +
                      std::to_string(ids[static_cast<size_t>(t)]) + " at position " + std::to_string(t) +
                      " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
  k3::SequenceState seq = model.new_sequence();
  std::unique_ptr<NpyRowWriter> npy;
  if (!o.out.empty() && k3cli::is_rank0()) npy = std::make_unique<NpyRowWriter>(o.out, T, n_vocab);
  const int k = static_cast<int>(std::min<int64_t>(o.top_k, n_vocab));
  std::vector<int32_t> idx(static_cast<size_t>(n_vocab));
  auto emit_rows = [&](const std::vector<float>& logits, int64_t t0, int64_t n) {
    for (int64_t r = 0; r < n; ++r) {
      const float* row = logits.data() + r * n_vocab;
      if (k3::first_nonfinite(std::span<const float>(row, static_cast<size_t>(n_vocab))) >= 0) {
        if (npy) npy->discard();
        nonfinite_row(model, ids, t0 + r, row, n_vocab, "the row of logits");
      }
    }
    if (npy) {
      npy->write(logits.data(), n * n_vocab);
      return;
    }
    if (!o.out.empty() || !k3cli::is_rank0()) return;
    for (int64_t r = 0; r < n; ++r) {
      const float* row = logits.data() + r * n_vocab;
      std::iota(idx.begin(), idx.end(), 0);
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                        [&](int32_t a, int32_t b) { return row[a] != row[b] ? row[a] > row[b] : a < b; });
      std::printf("pos %lld (id %d):", static_cast<long long>(t0 + r), ids[static_cast<size_t>(t0 + r)]);
      for (int i = 0; i < k; ++i) std::printf(" %d=%.6f", idx[i], row[idx[i]]);
      std::printf("\n");
    }
    std::fflush(stdout);
  };
  auto forward = [&](std::span<const int32_t> piece, bool all, k3::DumpSink* dump, int64_t upto) {
    try {
      const int64_t pos = static_cast<int64_t>(piece.data() - ids.data());
      return model.forward(seq, piece, ip.embeds(pos, static_cast<int64_t>(piece.size())), all, dump);
    } catch (const k3::Error& e) {
      if (npy) npy->discard();
      throw k3::Error(
          k3::explain_forward_error(e, model, std::span<const int32_t>(ids.data(), static_cast<size_t>(upto))));
    }
  };
  std::vector<float> last_row;  // logits of the last position, for --generate
  if (!o.dump.empty()) {
    // one piece (each dumped name once): all T rows of logits are held
    k3::DumpSink dump(o.dump);
    std::vector<float> logits = forward(ids, true, &dump, T);
    dump.finish();
    emit_rows(logits, 0, T);
    last_row.assign(logits.end() - n_vocab, logits.end());
  } else {
    // streamed in the model's prefill pieces (the same pieces forward() would cut, so the same
    // numbers): O(piece x vocab) memory whatever the number of ids
    const int64_t piece = std::max<int64_t>(1, model.options().prefill_chunk);
    for (int64_t t0 = 0; t0 < T; t0 += piece) {
      const int64_t n = std::min(piece, T - t0);
      std::vector<float> logits =
          forward(std::span<const int32_t>(ids.data() + t0, static_cast<size_t>(n)), true, nullptr, t0 + n);
      emit_rows(logits, t0, n);
      if (t0 + n == T) last_row.assign(logits.end() - n_vocab, logits.end());
    }
  }
  if (npy) npy->finish();
  if (o.generate == 0) k3cli::print_comm_counters("logits");
  if (o.generate > 0) {
    std::vector<int32_t> gen;
    int32_t next = argmax(last_row.data(), n_vocab);
    for (int i = 0; i < o.generate; ++i) {
      gen.push_back(next);
      if (i + 1 == o.generate) break;
      const int32_t one[1] = {next};
      std::vector<float> l = model.forward(seq, one, /*all_logits=*/false);
      if (k3::first_nonfinite(l) >= 0)
        throw k3::Error("logits: --generate: the logits of generated token " + std::to_string(i + 1) +
                        " are not finite");
      next = argmax(l.data(), n_vocab);
    }
    k3cli::print_comm_counters("logits");
    std::printf("generated:");
    for (size_t i = 0; i < gen.size(); ++i) std::printf("%s%d", i ? "," : " ", gen[i]);
    std::printf("\n");
  }
}

const k3cli::Registrar kReg(
    "logits", "teacher-forced logits for a token-id sequence (.npy or top-k per position)", [](CLI::App* sub) {
      auto o = std::make_shared<Options>();
      sub->add_option("-m,--model", o->model, "checkpoint directory")->required();
      sub->add_option("--ids", o->ids, "comma-separated token ids, e.g. 1,2,3");
      sub->add_option("--ids-file", o->ids_file, "file of token ids (comma/whitespace separated)");
      sub->add_option("-p,--prompt", o->prompt, "user text of one K3 chat turn (with --image: after the images)");
      sub->add_option("--image", o->images, "PNG, JPEG or WebP file in the chat turn (repeatable; needs a vision tower)");
      sub->add_flag("--no-think", o->no_think, "render the chat turn with thinking off");
      sub->add_option("--ids-out", o->ids_out, "with -p: write the rendered ids (comma-separated) to FILE");
      sub->add_option("--out", o->out, "write logits as .npy float32 [n_tokens, vocab]");
      o->cache_type.add_to(sub);
      sub->add_option("--top-k", o->top_k, "print the top-k logits per position (default 5)")
          ->check(k3cli::IntRange(1, INT32_MAX));
      sub->add_option("--dump", o->dump, "write named intermediates (.npy + manifest.json) to DIR");
      sub->add_option("--generate", o->generate,
                      "also print a greedy continuation of N tokens (prefill + decode steps)")
          ->check(k3cli::IntRange(0, INT32_MAX));
      o->input_limit.add_to(sub);
      o->numerics.add_to(sub);
      sub->callback([o] { run(*o); });
    });

}  // namespace
