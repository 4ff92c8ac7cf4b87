// `k3 tokenize` / `k3 detokenize`: text <-> ids with the Kimi tokenizer, and `--chat FILE.json`
// to render a K3 conversation (spec tokenizer.md §4) for debugging prompts.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "command.h"
#include "core/error.h"
#include "core/json_depth.h"
#include "core/read_file.h"
#include "tokenizer/chat_k3.h"
#include "tokenizer/tokenizer.h"

namespace {

struct VocabOpts {
  std::string model_dir, vocab, config;
};

void add_vocab_opts(CLI::App* sub, VocabOpts& v) {
  sub->add_option("-m,--model", v.model_dir, "model folder with tiktoken.model (+ tokenizer_config.json)");
  sub->add_option("--vocab", v.vocab, "a tiktoken.model file (specials: --config, else the K3 table)");
  sub->add_option("--config", v.config, "tokenizer_config.json for --vocab");
}

k3::Tokenizer load_tokenizer(const VocabOpts& v) {
  if (!v.model_dir.empty() && !v.vocab.empty()) throw k3::Error("tokenize: give -m DIR or --vocab FILE, not both");
  if (!v.model_dir.empty()) return k3::Tokenizer::load(v.model_dir);
  if (!v.vocab.empty()) return k3::Tokenizer::from_files(v.vocab, v.config);
  throw k3::Error("tokenize: expected -m DIR or --vocab FILE");
}

// The whole of `path` ("-" = stdin), bounded like every input (core/read_file.h): 1 GiB.
std::string read_all(const std::string& path, const std::string& what = "-f/--file") {
  k3::ReadLimits lim;
  lim.allow_pipe = true;
  if (path == "-") {
    std::string out;
    char buf[1 << 16];
    while (std::cin.read(buf, sizeof buf) || std::cin.gcount() > 0) {
      out.append(buf, static_cast<std::size_t>(std::cin.gcount()));
      if (out.size() > lim.max_bytes)
        throw k3::Error(what + ": stdin is larger than the limit of " + std::to_string(lim.max_bytes) + " bytes");
    }
    return out;
  }
  return k3::read_file_bounded(path, what, lim);
}

// Printable form of token bytes: ASCII as is, \n \r \t escaped, other bytes \xNN unless they
// form valid UTF-8 (printed raw).
std::string show_bytes(std::string_view b) {
  std::string o;
  for (unsigned char c : b) {
    if (c == '\n') o += "\\n";
    else if (c == '\r') o += "\\r";
    else if (c == '\t') o += "\\t";
    else if (c == '\\') o += "\\\\";
    else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      o += buf;
    } else o.push_back(static_cast<char>(c));
  }
  return o;
}

void print_ids(const k3::Tokenizer& tok, const std::vector<int32_t>& ids, bool ids_only) {
  if (ids_only) {
    std::string line;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (i) line.push_back(' ');
      line += std::to_string(ids[i]);
    }
    std::printf("%s\n", line.c_str());
    return;
  }
  for (int32_t id : ids) std::printf("%d\t%s\n", id, show_bytes(tok.token_bytes(id)).c_str());
  std::printf("# %zu tokens\n", ids.size());
}

struct TokenizeOpts {
  VocabOpts vocab;
  std::string text, file, chat, effort = "max";
  bool ids_only = false, allow_special = false, no_thinking = false, no_gen_prompt = false, show_text = false,
       timing = false;
};

void run_tokenize(const TokenizeOpts& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const k3::Tokenizer tok = load_tokenizer(o.vocab);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!o.chat.empty()) {
    // FILE.json: a list of messages, or {"messages": [...], "tools": [...], "kwargs": {...}}
    // (the k3_chat_vectors.json vector shape). Flags override kwargs.
    const std::string text = read_all(o.chat, "--chat");
    k3::check_json_depth(text, "--chat " + o.chat);
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::ordered_json::exception& e) {
      throw k3::Error(o.chat + ": expected JSON: " + e.what());
    }
    nlohmann::ordered_json messages = j;
    k3::ChatOptions opt;
    if (j.is_object()) {
      if (!j.contains("messages"))
        throw k3::Error(o.chat + ": expected a list of messages or an object with \"messages\"");
      messages = j["messages"];
      if (j.contains("kwargs")) opt = k3::ChatOptions::from_kwargs(j["kwargs"]);
      if (j.contains("tools") && !j["tools"].is_null()) opt.tools = j["tools"];
    }
    if (o.no_thinking) opt.thinking = false;
    if (o.no_gen_prompt) opt.add_generation_prompt = false;
    if (o.effort == "none") opt.thinking_effort.reset();
    else if (o.effort != "max") opt.thinking_effort = o.effort;
    const auto segs = k3::build_chat_segments(messages, opt);
    if (o.show_text) std::printf("%s\n", k3::join_chat_segments(segs).c_str());
    print_ids(tok, k3::encode_chat_segments(tok, segs), o.ids_only);
    return;
  }
  std::string text;
  if (!o.text.empty() && !o.file.empty()) throw k3::Error("tokenize: give TEXT or --file, not both");
  text = !o.file.empty() ? read_all(o.file) : !o.text.empty() ? o.text : read_all("-");
  const auto t1 = std::chrono::steady_clock::now();
  const auto ids = tok.encode(text, o.allow_special ? k3::AllowedSpecials::all() : k3::AllowedSpecials::none());
  const double enc_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  print_ids(tok, ids, o.ids_only);
  if (o.timing)
    std::fprintf(stderr, "tokenize: load %.3f s; encoded %zu bytes -> %zu ids in %.3f s = %.2f MB/s\n", load_s,
                 text.size(), ids.size(), enc_s, enc_s > 0 ? text.size() / 1e6 / enc_s : 0.0);
}

struct DetokenizeOpts {
  VocabOpts vocab;
  std::vector<std::string> ids;
  std::string file;
  bool show = false, skip_special = false;
};

void run_detokenize(const DetokenizeOpts& o) {
  const k3::Tokenizer tok = load_tokenizer(o.vocab);
  std::string src;
  for (const auto& s : o.ids) src += s + " ";
  if (!o.file.empty()) src += read_all(o.file);
  if (o.ids.empty() && o.file.empty()) src = read_all("-");
  std::vector<int32_t> ids;
  std::string cur;
  for (std::size_t i = 0; i <= src.size(); ++i) {
    const char c = i < src.size() ? src[i] : ' ';
    if (c == ' ' || c == ',' || c == '\n' || c == '\r' || c == '\t' || c == '[' || c == ']') {
      if (!cur.empty()) {
        std::size_t used = 0;
        long long v = 0;
        try {
          v = std::stoll(cur, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != cur.size()) throw k3::Error("detokenize: expected integer ids, found '" + cur + "'");
        if (v < 0 || v >= tok.vocab_size())
          throw k3::Error("detokenize: id " + cur + " out of range [0, " + std::to_string(tok.vocab_size()) + ")");
        ids.push_back(static_cast<int32_t>(v));
        cur.clear();
      }
    } else {
      cur.push_back(c);
    }
  }
  if (o.show) {
    for (int32_t id : ids) std::printf("%d\t%s\n", id, show_bytes(tok.token_bytes(id)).c_str());
    return;
  }
  const std::string out = tok.decode(ids, o.skip_special);
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::printf("\n");
}

const k3cli::Registrar kTokenize(
    "tokenize", "text or a chat JSON -> token ids (Kimi tiktoken + K3 chat format)", [](CLI::App* sub) {
      auto o = std::make_shared<TokenizeOpts>();
      add_vocab_opts(sub, o->vocab);
      sub->add_option("text", o->text, "text to encode (default: --file, else stdin)");
      sub->add_option("-f,--file", o->file, "read the text from FILE ('-' = stdin)");
      sub->add_option("--chat", o->chat, "render a conversation JSON (list of messages, or {messages, tools, kwargs})");
      sub->add_flag("--ids-only", o->ids_only, "print only the ids, space-separated, on one line");
      sub->add_flag("--allow-special", o->allow_special, "turn special-token spellings in the text into control ids");
      sub->add_flag("--no-thinking", o->no_thinking, "chat: enable_thinking=false");
      sub->add_option("--effort", o->effort, "chat: thinking_effort low|high|max|none")
          ->check(CLI::IsMember({"low", "high", "max", "none"}));
      sub->add_flag("--no-generation-prompt", o->no_gen_prompt, "chat: add_generation_prompt=false");
      sub->add_flag("--show-text", o->show_text, "chat: also print the rendered text");
      sub->add_flag("--timing", o->timing, "print load time and encode MB/s to stderr");
      sub->callback([o] { run_tokenize(*o); });
    });

const k3cli::Registrar kDetokenize(
    "detokenize", "token ids -> text (bytes concatenated, no spaces around specials)", [](CLI::App* sub) {
      auto o = std::make_shared<DetokenizeOpts>();
      add_vocab_opts(sub, o->vocab);
      sub->add_option("ids", o->ids, "ids (space/comma separated; default: --file, else stdin)");
      sub->add_option("-f,--file", o->file, "read ids from FILE");
      sub->add_flag("--show", o->show, "one line per id: id<TAB>bytes");
      sub->add_flag("--skip-special", o->skip_special,
                    "drop specials flagged special=true (keeps <|open|>, <|close|>, <|sep|>)");
      sub->callback([o] { run_detokenize(*o); });
    });

}  // namespace
