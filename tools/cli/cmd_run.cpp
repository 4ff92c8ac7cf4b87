// `k3 run -m DIR -p PROMPT | -f FILE [sampling flags]`: tokenizes the prompt (no [BOS], specials
// as plain text), prints it, then streams the continuation to stdout token by token (UTF-8
// safe) until a stop token (<|end_of_msg|>, [EOS]), -n tokens or a full context (-c).
// End-of-run stats go to stderr. --json prints one JSON object instead (for scripts/tests).
// --image FILE (repeatable): the images and the prompt text become one user turn of the K3 chat
// format (runtime/image_prompt.h; --no-think renders it with thinking off); the vision tower's
// embeddings enter the model at the <|media_pad|> positions. The continuation is then an
// assistant turn: stdout gets its response channel (the answer, markup stripped by
// runtime/chat_stream.h), stderr its think channel (prefixed "thinking: "); --json keeps the raw
// `text` and adds `reasoning` and `content`.
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"
#include "core/error.h"
#include "core/read_file.h"
#include "flag_checks.h"
#include "cache_flags.h"
#include "gen_flags.h"
#include "progress_bar.h"
#include "spec_flags.h"
#include "runtime/generator.h"
#include "runtime/image_prompt.h"
#include "vision/image_preprocess.h"
#include "runtime/loaded_model.h"
#include "runtime/nonfinite.h"
#include "runtime/stats.h"
#include "runtime/chat_stream.h"
#include "tokenizer/stream_decoder.h"

namespace {

struct RunOptions {
  k3cli::GenFlags gen;
  std::string prompt;
  std::string prompt_file;
  std::string prompt_ids;
  bool ignore_eos = false;
  bool no_stats = false;
  bool json = false;
  bool strict_utf8 = false;
  std::vector<std::string> images;  ///< --image FILE (repeatable)
  bool no_think = false;            ///< --no-think (with --image)
  k3cli::InputLimit input_limit;
  std::string state_save;      ///< --state-save FILE
  std::string state_load;      ///< --state-load FILE
  k3cli::CacheFlags cache{0};  // off unless --cache-dir / --cache-ram: one prompt per process
  k3cli::SpecFlags spec;       // speculative decoding
};

std::vector<int32_t> parse_ids(const std::string& s, int32_t vocab) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::size_t pos = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    if (pos == 0 || pos != item.size() || v < 0 || v >= vocab)
      throw k3::Error("--prompt-ids: expected comma-separated ids in [0, " + std::to_string(vocab) + "), found '" +
                      item + "'");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

void run(const RunOptions& o) {
  const int n_sources = !o.prompt.empty() + !o.prompt_file.empty() + !o.prompt_ids.empty();
  if (n_sources > 1 || (n_sources == 0 && o.state_load.empty()))
    throw k3::Error(n_sources == 0 ? "k3 run: no prompt (give -p TEXT, -f FILE or --prompt-ids LIST)"
                                   : "k3 run: give exactly one of -p, -f and --prompt-ids");
  if (o.gen.n_predict < -1)
    throw k3::Error("-n/--n-predict: expected -1 (until stop) or >= 0, found " + std::to_string(o.gen.n_predict));
  o.gen.cache_type.check_state_files(o.state_save, o.state_load);
  const k3::SamplerParams sp = o.gen.sampler_params();
  const std::string prompt_text =
      !o.prompt_file.empty() ? k3::read_file_bounded(o.prompt_file, "-f/--file", o.input_limit.limits()) : o.prompt;
  if (o.prompt_ids.empty() && n_sources == 1)
    k3cli::check_utf8(prompt_text, o.strict_utf8,
                      o.prompt_file.empty() ? "-p/--prompt" : "-f/--file '" + o.prompt_file + "'");
  if (!o.images.empty() && (!o.prompt_ids.empty() || !o.state_load.empty()))
    throw k3::Error("--image: give the text with -p or -f (the images and the text form one chat turn); "
                    "--prompt-ids and --state-load do not take images");
  if (o.no_think && o.images.empty()) throw k3::Error("--no-think: only with --image (it renders the chat turn)");
  if (!o.images.empty()) k3cli::refuse_ranks("k3 run --image");
  k3cli::set_threads(o.gen.threads);

  const k3::ExpertStreamOptions stream = o.gen.checked_stream_options(1);  // memory plan
  k3cli::ProgressBar progress;  // loads and prefills that take over a second (stderr)
  k3::ModelOptions mo = o.gen.model_options();
  mo.progress = progress.fn();
  k3::LoadedModel lm = k3::LoadedModel::open(o.gen.model_dir, mo, stream);
  k3cli::check_ranks(*lm.checkpoint, *lm.model);
  const std::optional<k3::PageInStats> warm = o.gen.warm_up(lm, progress.fn());
  const k3::Tokenizer& tok = *lm.tokenizer;
  std::vector<int32_t> prompt;
  k3::ImagePrompt ip;  // with --image: the chat turn's ids and image embeddings
  if (!o.images.empty()) {
    if (!lm.checkpoint->config().vision) k3::refuse_image_without_tower("--image '" + o.images[0] + "'");
    const auto cfg = k3::vision::ImagePreprocessConfig::for_model_dir(o.gen.model_dir);
    std::vector<k3::vision::ImagePatches> patches;
    nlohmann::ordered_json content = nlohmann::ordered_json::array();
    for (const std::string& f : o.images) {
      patches.push_back(k3::vision::preprocess_image_file(f, cfg, k3::vision::ImageLimits{}));
      content.push_back({{"type", "image_url"}, {"image_url", {{"url", f}}}});
    }
    content.push_back({{"type", "text"}, {"text", prompt_text}});
    const k3::vision::VisionTower tower(*lm.checkpoint);
    k3::ChatOptions copt;
    copt.thinking = !o.no_think;
    ip = k3::build_image_prompt(tok, &tower, lm.model->config().hidden_size,
                                nlohmann::ordered_json::array({{{"role", "user"}, {"content", content}}}), copt,
                                patches);
    prompt = ip.ids;
  } else {
    prompt = o.prompt_ids.empty() ? tok.encode(prompt_text) : parse_ids(o.prompt_ids, tok.vocab_size());
  }
  const std::vector<k3::EmbedRows> image_rows = ip.embeds();
  const std::vector<k3::MediaKey> image_keys = ip.media_keys();
  const std::string fingerprint = k3::model_fingerprint(*lm.checkpoint, *lm.model);
  // --state-load: the saved sequence continues. Its last sampled id was never fed (generate()'s
  // invariant), so it goes first, then the new prompt: with no new prompt the run continues
  // exactly as the saved run would have (bit-identical).
  k3::SequenceState seq = lm.model->new_sequence();
  std::vector<int32_t> history;  // the ids `seq` holds
  if (!o.state_load.empty()) {
    k3::SequenceFileMeta meta;
    // Under N ranks each rank reads its own piece (Model::state_file: F, F.rank1of2, ...).
    // Each rank's failure is gathered, so the ranks refuse together (k3cli::agree_ok).
    std::string load_error;
    try {
      seq = lm.model->load_sequence(lm.model->state_file(o.state_load), &meta, fingerprint);
    } catch (const k3::Error& e) {
      load_error = e.what();
    }
    k3cli::agree_ok(load_error);
    history = meta.ids;
    const nlohmann::json extra =
        meta.extra_json.empty() ? nlohmann::json::object() : nlohmann::json::parse(meta.extra_json);
    if (extra.contains("pending") && extra["pending"].is_number_integer()) {
      const int64_t id = extra["pending"].get<int64_t>();
      if (id < 0 || id >= tok.vocab_size())
        throw k3::Error("--state-load '" + o.state_load + "': pending id " + std::to_string(id) +
                        " outside the vocabulary");
      prompt.insert(prompt.begin(), static_cast<int32_t>(id));
    }
    if (prompt.empty())
      throw k3::Error("--state-load '" + o.state_load +
                      "': the saved sequence has no pending id; give -p, -f or --prompt-ids");
  }
  if (prompt.empty()) throw k3::Error("k3 run: the prompt is empty (expected at least 1 token)");
  k3::check_prompt_fits(seq.n_past(), static_cast<int64_t>(prompt.size()), o.gen.n_ctx);  // before printing anything
  const std::unique_ptr<k3::PrefixCache> cache = seq.n_past() == 0 ? o.cache.make(lm) : nullptr;

  k3::GenerateOptions go;
  go.n_predict = o.gen.n_predict;
  go.n_ctx = o.gen.n_ctx;
  go.n_batch = o.gen.n_batch;
  go.n_vocab = tok.vocab_size();
  if (!o.ignore_eos) go.stop_ids = lm.stop_ids();
  k3cli::check_same_input({history, prompt, go.stop_ids}, "prompt ids, saved-state ids or stop ids");
  go.cache = cache.get();
  go.on_prefill_progress = progress.fn();
  go.embeds = image_rows;
  go.media = image_keys;
  k3::LoadedModel draft;
  const std::unique_ptr<k3::Speculator> spec = o.spec.make(lm, sp, o.gen.model_options(), draft);
  go.speculative = spec.get();

  k3::Sampler sampler(sp);
  for (int32_t id : history) sampler.accept(id);  // the penalty history of the saved run
  k3::StreamDecoder dec(tok, /*skip_special=*/true);
  std::string text;
  if (!o.json && n_sources == 1) {  // the prompt is echoed once prefilled (after any progress bar)
    go.on_prefilled = [&](const k3::SequenceState&) {
      progress.finish();
      const std::string shown = o.prompt_ids.empty() ? prompt_text : tok.decode(prompt, true);
      std::fwrite(shown.data(), 1, shown.size(), stdout);
      if (!o.images.empty()) std::fputc('\n', stdout);  // the user turn, then the assistant's answer
      std::fflush(stdout);
    };
  }
  // --image: the continuation is an assistant turn, shown by channel (answer on stdout).
  std::optional<k3::ChatStream> turn;
  if (!o.images.empty()) turn.emplace(tok, /*prompt_opened_think=*/!o.no_think);
  std::string reasoning, content;
  bool reasoning_open = false;  // "thinking: " printed, its line not ended
  auto show_turn = [&](const std::vector<k3::ChatPiece>& pieces) {
    for (const k3::ChatPiece& p : pieces) {
      if (p.channel == k3::ChatChannel::Reasoning) {
        reasoning += p.text;
        if (o.json || p.text.empty()) continue;
        if (!reasoning_open) std::fputs("thinking: ", stderr);
        reasoning_open = true;
        std::fwrite(p.text.data(), 1, p.text.size(), stderr);
      } else if (p.channel == k3::ChatChannel::Content) {
        content += p.text;
        if (o.json || p.text.empty()) continue;
        if (reasoning_open) std::fputc('\n', stderr);
        reasoning_open = false;
        std::fwrite(p.text.data(), 1, p.text.size(), stdout);
        std::fflush(stdout);
      }
    }
  };
  auto on_token = [&](int32_t id) {
    const std::string piece = dec.push(id);
    text += piece;
    if (turn) {
      show_turn(turn->push(id));
    } else if (!o.json && !piece.empty()) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  k3::GenerateResult r;
  try {
    r = k3::generate(*lm.model, seq, prompt, sampler, go, on_token);
  } catch (const k3::Error& e) {
    if (!o.json) std::fputc('\n', stdout);
    throw k3::Error(k3::explain_forward_error(e, *lm.model, prompt));
  }
  std::string tail = dec.flush();
  text += tail;
  if (turn) {
    show_turn(turn->flush());
    if (reasoning_open) std::fputc('\n', stderr);
    tail.clear();  // shown by channel above
  }
  if (!o.state_save.empty()) {  // under N ranks each rank writes its own piece (Model::state_file)
    k3::SequenceFileMeta meta;
    meta.fingerprint = fingerprint;
    meta.ids = history;
    meta.ids.insert(meta.ids.end(), prompt.begin(), prompt.end());
    if (!r.ids.empty()) meta.ids.insert(meta.ids.end(), r.ids.begin(), r.ids.end() - 1);
    nlohmann::json extra = nlohmann::json::object();
    if (!r.ids.empty()) extra["pending"] = r.ids.back();
    meta.extra_json = extra.dump();
    k3::Timer ts;
    seq.save(lm.model->state_file(o.state_save), meta);
    if (!o.no_stats && k3cli::is_rank0())
      std::fprintf(stderr, "k3 run: saved %lld tokens of sequence state to '%s' (%.1f MiB, %.1f ms)\n",
                   static_cast<long long>(seq.n_past()), o.state_save.c_str(),
                   static_cast<double>(seq.bytes()) / 1048576.0, ts.ms());
  }

  k3::RunStats st;
  st.load_ms = lm.load_ms;
  st.n_prompt = r.n_prompt;
  st.prompt_ms = r.prompt_ms;
  st.n_gen = static_cast<int64_t>(r.ids.size());
  st.gen_ms = r.gen_ms;
  st.state_bytes = seq.bytes();
  st.seed = sp.seed;
  st.show_seed = sp.temp > 0;
  st.threads = k3cli::threads_phrase();

  if (o.json) {
    nlohmann::json j;
    j["prompt_ids"] = prompt;
    j["ids"] = r.ids;
    j["text"] = text;
    if (turn) {
      j["reasoning"] = reasoning;
      j["content"] = content;
    }
    j["stop"] = k3::stop_reason_name(r.stop);
    j["stop_id"] = r.stop_id;
    j["seed"] = sp.seed;
    j["stats"] = {{"load_ms", st.load_ms},
                  {"n_prompt", st.n_prompt},
                  {"prompt_ms", st.prompt_ms},
                  {"n_gen", st.n_gen},
                  {"gen_ms", st.gen_ms},
                  {"peak_rss_bytes", k3::peak_rss_bytes()},
                  {"state_bytes", st.state_bytes},
                  {"threads", k3::num_threads()},
                  {"omp_wait", k3cli::omp_wait_policy()}};
    if (warm)
      j["stats"]["page_in"] = {{"bytes", warm->bytes},
                               {"resident_bytes", warm->resident_bytes},
                               {"read_bytes", warm->read_bytes},
                               {"ms", warm->seconds * 1e3}};
    if (spec)
      j["speculative"] = {{"drafter", spec->drafter().name()},
                          {"verifies", spec->stats().verifies},
                          {"drafted", spec->stats().drafted},
                          {"accepted", spec->stats().accepted},
                          {"emitted", spec->stats().emitted}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  if (!o.no_stats) {
    if (r.stop == k3::StopReason::ContextFull)
      std::fprintf(stderr, "k3 run: stopped: context full (-c %lld)\n", static_cast<long long>(o.gen.n_ctx));
    std::fprintf(stderr, "%s\n", st.line().c_str());
    if (cache)
      std::fprintf(stderr, "%s\n",
                   k3cli::cache_stats_phrase(*cache, r.n_reused, static_cast<int64_t>(prompt.size())).c_str());
    if (lm.expert_store) std::fprintf(stderr, "%s\n", k3cli::expert_stream_line(*lm.expert_store).c_str());
    if (spec) std::fprintf(stderr, "%s\n", k3cli::SpecFlags::stats_line(*spec).c_str());
    k3cli::print_comm_counters("k3 run");
  }
}

k3cli::Registrar reg("run", "Generate a continuation of a prompt, streamed to stdout (llama.cpp-style flags)",
                     [](CLI::App* sub) {
                       auto o = std::make_shared<RunOptions>();
                       o->gen.add_to(sub);
                       o->spec.add_to(sub);
                       sub->add_option("-p,--prompt", o->prompt, "prompt text (raw, no chat template, no [BOS])");
                       sub->add_option("-f,--file", o->prompt_file, "read the prompt from this file");
                       sub->add_option("--prompt-ids", o->prompt_ids, "prompt as comma-separated token ids");
                       sub->add_option("--image", o->images,
                                       "PNG, JPEG or WebP file: the images and -p/-f text form one user turn of the "
                                       "K3 chat format (repeatable; needs a checkpoint with a vision tower)");
                       sub->add_flag("--no-think", o->no_think, "with --image: render the chat turn with thinking off");
                       sub->add_flag("--strict-utf8", o->strict_utf8,
                                     "refuse a prompt that is not valid UTF-8 (default: warn)");
                       o->input_limit.add_to(sub);
                       sub->add_flag("--ignore-eos", o->ignore_eos, "do not stop at <|end_of_msg|> / [EOS]");
                       sub->add_flag("--no-stats", o->no_stats, "do not print the stats line on stderr");
                       sub->add_option("--state-save", o->state_save,
                                       "after the run, save the whole sequence state (KDA + MLA, the ids, the model "
                                       "fingerprint) to this file (under N ranks rank R > 0 saves its heads' "
                                       "piece to FILE.rank<R>of<N>)");
                       sub->add_option("--state-load", o->state_load,
                                       "continue a sequence saved by --state-save (the prompt, if any, is appended; "
                                       "without one the saved run continues exactly)");
                       o->cache.add_to(sub);
                       sub->add_flag("--json", o->json,
                                     "print one JSON object (prompt_ids, ids, text, stop, stats) instead of streaming");
                       sub->callback([o] { run(*o); });
                     });

}  // namespace
