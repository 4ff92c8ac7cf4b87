// `k3 chat -m DIR`: interactive multi-turn chat in the K3 chat format (spec §5.2). Reads one user
// message per line from stdin (a terminal or a pipe), renders the conversation with render_chat,
// streams the answer with the markup stripped, stops at <|end_of_msg|>, and keeps the parsed
// assistant message (reasoning + content) for the next turn. Ctrl-C stops the current answer;
// Ctrl-D (EOF) exits 0. Thinking (--thinking): `fold` (default) shows its first lines, then one
// line saying how many tokens were folded; `/thinking` or `/think` as a message prints the last
// turn's whole thinking; `full` streams all of it; `hide` prints one line with its token count.
// It is dimmed on a terminal and wrapped in <think> ... </think> lines otherwise (no ANSI codes
// when stdout is not a terminal). A turn that ends inside the think channel, or at the -n limit,
// ends with a one-line notice saying so and what to change.
// Each turn the whole conversation is the prompt; the prefix cache (runtime/prefix_cache.h) resumes it at its longest cached prefix.
// The conversation survives a full context: when it does not fit in -c (with room for the
// answer) the oldest turns are dropped at turn boundaries, the system message kept
// (runtime/chat_history.h), and a message that cannot fit at all is refused with a note.
// `/image PATH` attaches a PNG, JPEG or WebP picture to the next message (a checkpoint with a
// vision tower; the tower runs once per picture, runtime/image_prompt.h); the picture is part of
// that user turn (an image_url part whose url is the path, so --state-save / --state-load keep it
// and read it again), and it leaves the context with its turn.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstring>
#include <optional>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "command.h"
#include "ranks.h"
#include "runtime/step_plan.h"
#include "core/error.h"
#include "flag_checks.h"
#include "cache_flags.h"
#include "gen_flags.h"
#include "progress_bar.h"
#include "spec_flags.h"
#include "runtime/chat_history.h"
#include "runtime/chat_stream.h"
#include "runtime/generator.h"
#include "runtime/image_prompt.h"
#include "runtime/loaded_model.h"
#include "runtime/nonfinite.h"
#include "runtime/stats.h"
#include "tokenizer/chat_k3.h"
#include "tokenizer/chat_output.h"
#include "vision/image_preprocess.h"
#include "vision/vision_tower.h"

namespace {

std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the SIGINT flag must be lock-free");

extern "C" void on_sigint(int) { g_interrupted.store(true); }

// Installs on_sigint for its lifetime (the answer being generated), then restores the old action.
class SigintGuard {
 public:
  SigintGuard() {
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_);
  }
  ~SigintGuard() { sigaction(SIGINT, &old_, nullptr); }

 private:
  struct sigaction old_ {};
};

struct ChatCliOptions {
  k3cli::GenFlags gen;
  std::string system;
  std::string effort = "max";
  bool no_think = false;
  std::string thinking = "fold";  ///< fold | full | hide (--show-thinking = full, --hide-thinking = hide)
  bool stats = false;
  bool ignore_eos = false;
  bool strict_utf8 = false;
  k3cli::CacheFlags cache;
  k3cli::SpecFlags spec;   ///< speculative decoding
  std::string state_save;  ///< --state-save FILE: the conversation + sequence state after each answer
  std::string state_load;  ///< --state-load FILE: resume such a conversation
};

// std::getline with a bound: reads one line (without '\n') into `line`; a line longer than
// `max` bytes is consumed up to its end but not stored (too_long = true). False at EOF with
// nothing read.
bool read_line_bounded(std::istream& in, std::string& line, uint64_t max, bool& too_long) {
  line.clear();
  too_long = false;
  bool any = false;
  std::streambuf* sb = in.rdbuf();
  while (true) {
    const int c = sb->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      in.setstate(std::ios::eofbit);
      return any;
    }
    any = true;
    if (c == '\n') return true;
    if (too_long) continue;
    if (line.size() >= max) {
      too_long = true;
      line.clear();
      line.shrink_to_fit();
      continue;
    }
    line.push_back(static_cast<char>(c));
  }
}

void out(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

// How the think channel is shown (see the file comment). Lines and bytes shown before folding.
constexpr int kFoldLines = 3;
constexpr std::size_t kFoldBytes = 360;

// The reasoning of one answer as the terminal shows it: in `fold` mode its first kFoldLines
// lines (at most kFoldBytes bytes, cut at a character boundary), in `full` mode all of it, in
// `hide` mode nothing; the whole text is kept for /think.
class ThinkingView {
 public:
  ThinkingView(std::string mode, bool tty) : mode_(std::move(mode)), tty_(tty) {}
  const char* open() const { return tty_ ? "\x1b[2m" : "<think>\n"; }
  std::string close() const {
    const char* nl = last_nl_ ? "" : "\n";
    return tty_ ? std::string("\x1b[0m") + nl : std::string(nl) + "</think>\n";
  }
  /// Text shown now for reasoning text `t` (empty once folded or when hidden).
  std::string add(const std::string& t) {
    text_ += t;
    if (mode_ == "hide") return "";
    if (mode_ == "full") {
      if (!t.empty()) last_nl_ = t.back() == '\n';
      return start() + t;
    }
    if (folded_) return "";
    std::string shown;
    for (std::size_t i = 0; i < t.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(t[i]);
      const bool boundary = (c & 0xC0) != 0x80;
      if (boundary && (lines_ >= kFoldLines || bytes_ >= kFoldBytes)) {
        folded_ = true;
        break;
      }
      if (lines_ == 0 && bytes_ == 0 && shown.empty() && (c == '\n' || c == ' ')) continue;  // leading blank
      shown.push_back(static_cast<char>(c));
      ++bytes_;
      if (c == '\n') ++lines_;
    }
    if (shown.empty()) return "";
    last_nl_ = shown.back() == '\n';
    return start() + shown;
  }
  /// Closes what was shown and, when something was folded or hidden, adds the one-line note.
  std::string end(int64_t n_tokens) {
    std::string r;
    if (open_) r += close();
    open_ = false;
    if (text_.empty()) return r;
    char b[160];
    if (mode_ == "hide")
      std::snprintf(b, sizeof b, "[thinking hidden: %lld tokens; /think shows it]\n", static_cast<long long>(n_tokens));
    else if (folded_)
      std::snprintf(b, sizeof b, "[thinking: %lld tokens, folded; /think shows all of it]\n",
                    static_cast<long long>(n_tokens));
    else return r;
    r += tty_ ? "\x1b[2m" + std::string(b, std::strlen(b) - 1) + "\x1b[0m\n" : std::string(b);
    return r;
  }
  bool active() const { return open_; }
  const std::string& text() const { return text_; }

 private:
  std::string start() {
    if (open_) return "";
    open_ = true;
    return open();
  }
  std::string mode_;
  bool tty_;
  std::string text_;
  bool open_ = false, folded_ = false, last_nl_ = false;
  int lines_ = 0;
  std::size_t bytes_ = 0;
};

void run(const ChatCliOptions& o) {
  // Under N ranks every rank runs this loop: rank 0 reads each line from stdin and broadcasts
  // it (k3cli::share_line), every rank then makes the same decisions and the same forwards, and
  // rank 0 alone prints. Each rank saves and loads its own part of a state (--state-save FILE:
  // FILE on rank 0, FILE.rank<r>of<N> on rank r: Model::state_file).
  const int n_ranks = k3cli::world()->size();
  const int rank = k3cli::world()->rank();
  if (o.effort != "low" && o.effort != "high" && o.effort != "max")
    throw k3::Error("--effort: expected low, high or max, found '" + o.effort + "'");
  if (o.thinking != "fold" && o.thinking != "full" && o.thinking != "hide")
    throw k3::Error("--thinking: expected fold, full or hide, found '" + o.thinking + "'");
  if (o.gen.n_predict < -1)
    throw k3::Error("-n/--n-predict: expected -1 (until stop) or >= 0, found " + std::to_string(o.gen.n_predict));
  o.gen.cache_type.check_state_files(o.state_save, o.state_load);
  const k3::SamplerParams sp = o.gen.sampler_params();
  k3cli::set_threads(o.gen.threads);
  const k3::ExpertStreamOptions stream = o.gen.checked_stream_options(1);  // memory plan
  k3cli::ProgressBar progress;  // loads and prefills that take over a second (stderr)
  k3::ModelOptions mo = o.gen.model_options();
  mo.progress = progress.fn();
  k3::LoadedModel lm = k3::LoadedModel::open(o.gen.model_dir, mo, stream);
  k3cli::check_ranks(*lm.checkpoint, *lm.model);
  o.gen.warm_up(lm, progress.fn());
  const k3::Tokenizer& tok = *lm.tokenizer;

  k3::ChatOptions copt;
  copt.thinking = !o.no_think;
  copt.thinking_effort = o.effort;
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
  const std::string fingerprint = k3::model_fingerprint(*lm.checkpoint, *lm.model);
  // --state-load: the conversation and the sequence state after its last answer. The next
  // prompt continues that state when it extends the saved ids (else the prefix cache serves it).
  // Default-constructed (empty) until a turn's prompt is prefilled.
  std::optional<k3::SequenceState> resume;
  std::vector<int32_t> resume_ids;
  std::vector<std::string> resumed_paths;  ///< the resumed conversation's picture files, in order
  if (!o.state_load.empty()) {
    if (!o.system.empty()) throw k3::Error("--system: the conversation comes from --state-load; give one of them");
    k3::SequenceFileMeta meta;
    std::string load_error;  // gathered: the ranks refuse together (k3cli::agree_ok)
    try {
      resume = lm.model->load_sequence(lm.model->state_file(o.state_load), &meta, fingerprint);
    } catch (const k3::Error& e) {
      load_error = e.what();
    }
    k3cli::agree_ok(load_error);
    resume_ids = meta.ids;
    k3cli::check_same_input({resume_ids}, "saved-state ids (--state-load)");
    const nlohmann::ordered_json extra =
        meta.extra_json.empty() ? nlohmann::ordered_json::object() : nlohmann::ordered_json::parse(meta.extra_json);
    if (!extra.contains("messages") || !extra["messages"].is_array())
      throw k3::Error("--state-load '" + o.state_load +
                      "': not a k3 chat state (no \"messages\" array; a `k3 run` state?)");
    messages = extra["messages"];
    // pictures of a resumed conversation are read again from their paths (the image parts' urls)
    for (const auto& m : messages)
      if (m.is_object() && m.value("role", "") == "user" && m.contains("content") && m["content"].is_array())
        for (const auto& part : m["content"])
          if (part.is_object() && part.value("type", "") == "image_url" && part.contains("image_url") &&
              part["image_url"].is_object() && part["image_url"].contains("url") &&
              part["image_url"]["url"].is_string())
            resumed_paths.push_back(part["image_url"]["url"].get<std::string>());
    std::fprintf(stderr, "k3 chat: resumed %zu messages (%lld tokens of state) from '%s'\n", messages.size(),
                 static_cast<long long>(resume->n_past()), o.state_load.c_str());
  }

  // Pictures (/image PATH): the conversation's images in order (one per image part of its user
  // messages, the part's url is the path), their tower rows and digests, computed once each; and
  // the ones attached to the next message.
  struct ChatPicture {
    std::string path;
    k3::vision::ImagePatches patches;
    std::vector<float> rows;
    uint64_t digest = 0;
  };
  std::vector<ChatPicture> pictures, attached;
  std::unique_ptr<k3::vision::VisionTower> tower;
  const int64_t hidden = lm.model->config().hidden_size;
  auto load_picture = [&](const std::string& path) {
    if (!lm.checkpoint->config().vision) k3::refuse_image_without_tower("/image '" + path + "'");
    // Every rank reaches this refusal alike (a file read per rank could differ between nodes).
    if (lm.model->comm().size() > 1)
      throw k3::Error("/image '" + path + "': pictures are not supported under " +
                      std::to_string(lm.model->comm().size()) +
                      " MPI ranks (the vision tower runs as one process; run k3 chat without the launcher)");
    if (!tower) tower = std::make_unique<k3::vision::VisionTower>(*lm.checkpoint);
    ChatPicture p;
    p.path = path;
    p.patches = k3::vision::preprocess_image_file(path, k3::vision::ImagePreprocessConfig::for_model_dir(o.gen.model_dir),
                                                  k3::vision::ImageLimits{});
    const k3::vision::VisionOutput v = tower->encode(std::span<const k3::vision::ImagePatches>(&p.patches, 1));
    p.rows = v.embeddings;
    p.digest = k3::image_digest(p.patches);
    return p;
  };
  for (const std::string& path : resumed_paths) pictures.push_back(load_picture(path));

  const bool tty_in = isatty(0) != 0, tty_out = isatty(1) != 0;
  // notices (folded thinking, a turn without an answer): dimmed on a terminal
  auto notice = [&](const std::string& s) { out(tty_out ? "\x1b[2m" + s + "\x1b[0m\n" : s + "\n"); };
  if (tty_in)
    std::fprintf(stderr, "k3 chat: %s | Ctrl-C stops an answer, Ctrl-D exits%s\n", sp.describe().c_str(),
                 copt.thinking ? ", /think shows the last thinking" : "");
  std::string last_thinking;  // for /think

  k3::Sampler sampler(sp);
  // Every turn's prompt is the whole conversation: the prefix cache resumes it at the last
  // KDA snapshot of the previous turns (bit-identical to recomputing it).
  const std::unique_ptr<k3::PrefixCache> cache = o.cache.make(lm);
  k3::GenerateOptions go;
  go.cache = cache.get();
  go.n_predict = o.gen.n_predict;
  go.n_ctx = o.gen.n_ctx;
  go.n_batch = o.gen.n_batch;
  go.n_vocab = tok.vocab_size();
  if (!o.ignore_eos) go.stop_ids = lm.stop_ids();
  // Ctrl-C stops an answer in one process; under N ranks the launcher ends the job instead
  // (one rank stopping alone would leave the others in the step's collectives).
  go.cancel = n_ranks == 1 ? &g_interrupted : nullptr;
  go.on_prefill_progress = progress.fn();
  k3::LoadedModel draft;
  const std::unique_ptr<k3::Speculator> spec = o.spec.make(lm, sp, o.gen.model_options(), draft);
  go.speculative = spec.get();

  // A line longer than this cannot fit in -c whatever it says (no token spans more bytes than
  // the longest one), so it is refused without being tokenized or even kept in memory.
  std::size_t max_token_bytes = 1;
  for (int32_t id = 0; id < tok.vocab_size(); ++id)
    max_token_bytes = std::max(max_token_bytes, tok.token_bytes(id).size());
  const uint64_t max_line = static_cast<uint64_t>(o.gen.n_ctx) * max_token_bytes;
  // room kept for the answer when old turns are dropped: -n, else a quarter of the context
  const int64_t reserve = o.gen.n_predict >= 0 ? o.gen.n_predict : o.gen.n_ctx / 4;

  std::string line;
  while (true) {
    if (tty_in) out("> ");
    bool too_long = false;
    bool got = rank == 0 && read_line_bounded(std::cin, line, max_line, too_long);
    if (n_ranks > 1) k3cli::share_line(got, too_long, line);
    if (!got) break;
    if (too_long) {
      std::fprintf(
          stderr,
          "k3 chat: message not sent: longer than %llu bytes, it cannot fit in -c/--ctx-size %lld tokens (the conversation continues)\n",
          static_cast<unsigned long long>(max_line), static_cast<long long>(o.gen.n_ctx));
      continue;
    }
    if (line.empty()) continue;
    if (line == "/think" || line == "/thinking") {  // the last answer's whole thinking, not sent
      if (last_thinking.empty()) {
        notice("[no thinking in the last answer]");
      } else {
        ThinkingView full("full", tty_out);
        out(full.add(last_thinking));
        out(full.end(0));
      }
      continue;
    }
    if (line.rfind("/image ", 0) == 0 || line == "/image") {  // a picture for the next message, not sent
      const std::string path = line.size() > 7 ? line.substr(7) : "";
      if (path.empty()) {
        std::fprintf(stderr, "k3 chat: /image PATH attaches a PNG, JPEG or WebP file to the next message\n");
        continue;
      }
      try {
        attached.push_back(load_picture(path));
        const auto& p = attached.back().patches;
        std::fprintf(stderr, "k3 chat: attached '%s' (%lldx%lld, %lld image tokens) to the next message\n",
                     path.c_str(), static_cast<long long>(p.width), static_cast<long long>(p.height),
                     static_cast<long long>(p.n_tokens()));
      } catch (const k3::Error& e) {
        std::fprintf(stderr, "k3 chat: picture not attached: %s\n", e.what());
      }
      continue;
    }
    try {
      k3cli::check_utf8(line, o.strict_utf8, "k3 chat: message");
    } catch (const k3::Error& e) {  // --strict-utf8: refused, the conversation goes on
      std::fprintf(stderr, "k3 chat: message not sent: %s\n", e.what());
      continue;
    }
    nlohmann::ordered_json kept = messages;  // restored when the message is refused
    const size_t kept_pictures = pictures.size();
    if (attached.empty()) {
      messages.push_back({{"role", "user"}, {"content", line}});
    } else {
      nlohmann::ordered_json content = nlohmann::ordered_json::array();
      for (ChatPicture& p : attached) {
        content.push_back({{"type", "image_url"}, {"image_url", {{"url", p.path}}}});
        pictures.push_back(std::move(p));
      }
      attached.clear();
      content.push_back({{"type", "text"}, {"text", line}});
      messages.push_back({{"role", "user"}, {"content", content}});
    }
    copt.images.clear();
    for (const ChatPicture& p : pictures) copt.images.push_back(k3::chat_image(p.patches));
    k3::ChatFit fit = k3::fit_chat_to_context(tok, messages, copt, o.gen.n_ctx, reserve);
    if (!fit.fits) {
      messages = std::move(kept);
      pictures.resize(kept_pictures);  // the refused message's pictures are dropped with it
      std::fprintf(
          stderr,
          "k3 chat: message not sent: with the system prompt it takes more than -c/--ctx-size %lld tokens (the conversation continues)\n",
          static_cast<long long>(o.gen.n_ctx));
      continue;
    }
    if (fit.dropped_turns > 0)
      std::fprintf(
          stderr,
          "k3 chat: context full: dropped the %d oldest turn(s) (%lld tokens)%s; %zu tokens of conversation kept\n",
          fit.dropped_turns, static_cast<long long>(fit.dropped_tokens),
          o.system.empty() ? "" : ", the system prompt kept", fit.prompt.size());
    const std::vector<int32_t> prompt = std::move(fit.prompt);
    pictures.erase(pictures.begin(), pictures.begin() + fit.dropped_images);  // with their turns
    std::vector<k3::EmbedRows> image_rows;
    std::vector<k3::MediaKey> image_keys;
    for (const k3::MediaSpan& m : fit.media) {
      const ChatPicture& p = pictures[static_cast<size_t>(m.image)];
      image_rows.push_back({m.pos, m.n, p.rows});
      image_keys.push_back({m.pos, m.n, p.digest});
    }

    k3::SequenceState seq = lm.model->new_sequence();
    size_t n_continued = 0;  // prompt ids already in a resumed state
    if (resume && resume_ids.size() < prompt.size() &&
        std::equal(resume_ids.begin(), resume_ids.end(), prompt.begin())) {
      seq = std::move(*resume);
      n_continued = resume_ids.size();
    }
    resume.reset();
    k3::SequenceState at_prompt;  // with --state-save: the state after this turn's prompt
    if (!o.state_save.empty()) go.on_prefilled = [&](const k3::SequenceState& st) { at_prompt = st; };

    k3::ChatStream stream(tok, copt.thinking);
    ThinkingView thinking(o.thinking, tty_out);
    bool reasoning_now = copt.thinking;  // channel of the last text seen
    bool any_content = false;
    int64_t n_thinking = 0;  // generated ids while in the think channel
    auto show = [&](const std::vector<k3::ChatPiece>& pieces) {
      for (const auto& p : pieces) {
        if (p.channel == k3::ChatChannel::Hidden) continue;
        const bool r = p.channel == k3::ChatChannel::Reasoning;
        if (r) {
          out(thinking.add(p.text));
        } else {
          if (reasoning_now || thinking.active()) out(thinking.end(n_thinking));
          any_content = any_content || !p.text.empty();
          out(p.text);
        }
        reasoning_now = r;
      }
    };
    sampler.reset_history();  // generate() accepts the prompt's ids
    for (size_t i = 0; i < n_continued; ++i) sampler.accept(prompt[i]);
    go.cache = n_continued > 0 ? nullptr : cache.get();
    // image rows are relative to the fed part of the prompt (after any resumed ids)
    const std::vector<k3::EmbedRows> fed_rows = k3::embeds_in_range(
        image_rows, static_cast<int64_t>(n_continued), static_cast<int64_t>(prompt.size() - n_continued), hidden);
    go.embeds = fed_rows;
    go.media = image_keys;
    g_interrupted.store(false);
    k3::GenerateResult res;
    {  // the prompt fits (checked above); another error (e.g. NaN weights) propagates to main()
      SigintGuard guard;
      try {
        res = k3::generate(*lm.model, seq, std::span<const int32_t>(prompt).subspan(n_continued), sampler, go,
                           [&](int32_t id) {
                             show(stream.push(id));
                             if (reasoning_now) ++n_thinking;
                             return true;
                           });
      } catch (const k3::Error& e) {
        out("\n");
        throw k3::Error(k3::explain_forward_error(e, *lm.model, prompt));
      }
    }
    show(stream.flush());
    const bool ended_in_thinking = reasoning_now && !any_content;
    if (reasoning_now) out(thinking.end(n_thinking));
    last_thinking = thinking.text();
    out(res.stop == k3::StopReason::Cancelled ? "\n[stopped]\n" : "\n");
    if (res.stop != k3::StopReason::Cancelled && ended_in_thinking && copt.thinking) {
      const std::string why = res.stop == k3::StopReason::MaxTokens     ? "at the -n limit"
                              : res.stop == k3::StopReason::ContextFull ? "with the context full"
                                                                        : "at a stop token";
      notice("[the answer ended inside its thinking (" + std::to_string(n_thinking) + " tokens, " + why +
             "): no answer; raise -n, or use --effort low or --no-think]");
    } else if (res.stop == k3::StopReason::MaxTokens) {
      notice("[answer cut at the -n limit of " + std::to_string(o.gen.n_predict) + " tokens]");
    }
    if (res.stop == k3::StopReason::ContextFull)
      std::fprintf(stderr,
                   "k3 chat: the answer filled the context (-c/--ctx-size %lld); the oldest turns go next turn\n",
                   static_cast<long long>(o.gen.n_ctx));

    // History: the parsed answer (the next prompt renders it).
    const k3::ParsedOutput parsed = k3::parse_k3_output(tok, res.ids, copt.thinking);
    nlohmann::ordered_json msg = {{"role", "assistant"}, {"content", parsed.content}};
    if (!parsed.reasoning.empty()) msg["reasoning_content"] = parsed.reasoning;
    messages.push_back(msg);
    const uint64_t state_bytes = seq.bytes();
    if (n_continued > 0) res.n_reused = static_cast<int64_t>(n_continued);
    if (!o.state_save.empty() && at_prompt.n_past() == static_cast<int64_t>(prompt.size())) {  // after every answer
      // The state at the end of this turn's prompt (prefill-computed): the next turn's prompt
      // extends exactly these ids, so a resumed session continues it without recomputation.
      k3::SequenceFileMeta meta;
      meta.fingerprint = fingerprint;
      meta.ids = prompt;
      meta.extra_json = nlohmann::ordered_json({{"messages", messages}}).dump();
      try {
        at_prompt.save(lm.model->state_file(o.state_save), meta);  // written to a temporary file, then renamed onto the name
      } catch (const k3::Error& e) {
        throw k3::Error(std::string("--state-save: ") + e.what());
      }
    }
    if (o.stats) {
      k3::RunStats st;
      st.load_ms = lm.load_ms;
      st.n_prompt = res.n_prompt;
      st.prompt_ms = res.prompt_ms;
      st.n_gen = static_cast<int64_t>(res.ids.size());
      st.gen_ms = res.gen_ms;
      st.state_bytes = state_bytes;
      st.threads = k3cli::threads_phrase();
      const std::string c = cache ? k3cli::cache_stats_phrase(*cache, res.n_reused, static_cast<int64_t>(prompt.size()))
                                  : std::string("cache: off");
      std::fprintf(stderr, "%s | %s | stop: %s\n", st.line().c_str(), c.c_str(), k3::stop_reason_name(res.stop));
      if (spec) std::fprintf(stderr, "%s\n", k3cli::SpecFlags::stats_line(*spec).c_str());
    }
  }
  if (tty_in) out("\n");
}

k3cli::Registrar reg(
    "chat", "Interactive multi-turn chat in the K3 chat format (Ctrl-C stops an answer, Ctrl-D exits)",
    [](CLI::App* sub) {
      auto o = std::make_shared<ChatCliOptions>();
      o->gen.n_predict = -1;
      o->gen.add_to(sub);
      sub->add_option("--system", o->system, "system message at the start of the conversation");
      sub->add_flag("--no-think", o->no_think, "disable thinking (answer directly)");
      sub->add_option("--effort", o->effort, "thinking effort: low, high or max")->capture_default_str();
      sub->add_option("--thinking", o->thinking,
                      "how the thinking is shown: fold (its first lines, then a count; /think "
                      "shows all of it), full, or hide")
          ->capture_default_str();
      sub->add_flag_callback(
          "--show-thinking", [o] { o->thinking = "full"; }, "stream all of the thinking (--thinking full)");
      sub->add_flag_callback(
          "--hide-thinking", [o] { o->thinking = "hide"; }, "print only the thinking's token count (--thinking hide)");
      sub->add_flag("--ignore-eos", o->ignore_eos,
                    "do not stop at <|end_of_msg|> / [EOS] (answers end at -n or -c; for testing)");
      sub->add_flag("--strict-utf8", o->strict_utf8, "refuse (skip) a message that is not valid UTF-8 (default: warn)");
      sub->add_flag("--stats", o->stats, "print a stats line on stderr after each answer");
      o->cache.add_to(sub);
      o->spec.add_to(sub);
      sub->add_option("--state-save", o->state_save,
                      "after every answer, save the conversation and its sequence state to this file");
      sub->add_option("--state-load", o->state_load, "resume a conversation saved by --state-save");
      sub->callback([o] { run(*o); });
    });

}  // namespace
