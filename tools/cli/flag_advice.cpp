// check_args, the llama.cpp flag table and the model-directory check (flag_advice.h).
#include "flag_advice.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string_view>

#include "core/error.h"

namespace k3cli {
namespace {

/// -h/--help among the arguments: the path checks pass, so that the help is printed.
bool g_help_asked = false;

/// llama.cpp spellings k3 accepts, rewritten to k3's long names before CLI11 parses.
const std::map<std::string, std::string>& aliases() {
  static const std::map<std::string, std::string> m{
      {"-np", "--parallel"}, {"-md", "--draft-model"}, {"--model-draft", "--draft-model"}};
  return m;
}

/// A llama.cpp flag (all its spellings) that k3 does not have, and what k3 offers instead.
/// `noop_in`: the subcommand where it names k3's behaviour already: accepted there, with `note`.
struct LlamaFlag {
  LlamaFlag(std::vector<std::string> n, std::string a, std::string noop = {}, std::string nt = {})
      : names(std::move(n)), advice(std::move(a)), noop_in(std::move(noop)), note(std::move(nt)) {}
  std::vector<std::string> names;
  std::string advice;
  std::string noop_in;
  std::string note;
};

const std::vector<LlamaFlag>& llama_flags() {
  static const std::vector<LlamaFlag> t{
      {{"-ngl", "--gpu-layers", "--n-gpu-layers", "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"},
       "k3 has no GPU backend yet: every layer runs on the CPU; drop the flag (--expert-cache-gb GB streams the "
       "routed experts from the SSD when RAM is short)",
       ""},
      {{"-sm", "--split-mode", "-ts", "--tensor-split", "-mg", "--main-gpu", "-dev", "--device", "-devd",
        "--device-draft", "--list-devices", "-nkvo", "--no-kv-offload", "-ot", "--override-tensor"},
       "k3 has no GPU backend yet: every tensor stays on the CPU; drop the flag",
       ""},
      {{"-hf", "-hfr", "--hf-repo", "-hff", "--hf-file", "-hft", "--hf-token", "-hfd", "-hfrd", "--hf-repo-draft",
        "-mu", "--model-url"},
       "k3 does not download models: fetch the safetensors checkpoint folder first (e.g. huggingface-cli download "
       "REPO --local-dir DIR) and pass -m DIR",
       ""},
      {{"--n-cpu-moe", "-ncmoe", "--cpu-moe", "-cmoe"},
       "k3 keeps every expert on the CPU already; to bound the RAM the routed experts take, stream them from the "
       "SSD with --expert-cache-gb GB (an LRU cache of that size; --stream-experts for none)",
       ""},
      {{"--numa"},
       "k3 has no NUMA placement of its own: run one k3 process per NUMA node, each under numactl "
       "--cpunodebind=N --membind=N with -t set to that node's cores",
       ""},
      {{"-fa", "--flash-attn"}, "k3 has a single attention implementation (MLA on the CPU); drop the flag", ""},
      {{"-cb", "--cont-batching"},
       "continuous batching is k3 serve's, always on (-np/--parallel sequences per forward); this subcommand "
       "runs one sequence",
       "serve",
       "k3 serve always batches continuously (-np/--parallel sequences per forward); the flag is not needed"},
      {{"-nocb", "--no-cont-batching"}, "k3 serve always batches continuously; -np 1 serves one request at a time", ""},
      {{"-cnv", "--conversation", "-i", "--interactive", "-if", "--interactive-first", "-st", "--single-turn"},
       "use k3 chat -m DIR for a conversation (k3 run continues one prompt)",
       ""},
      {{"-no-cnv", "--no-conversation"}, "k3 run never converses (it continues the prompt); drop the flag", ""},
      {{"--mlock"},
       "k3 maps the checkpoint read-only and does not lock it in RAM; drop the flag (--ram-gb GB checks that the "
       "memory plan fits; --trunk-memory copy holds the trunk in anonymous memory)",
       ""},
      {{"--no-mmap", "--mmap"},
       "k3 maps the checkpoint; --trunk-memory copy copies the trunk into anonymous 2 MiB pages at load (the "
       "page cache's copy dropped), --stream-experts reads the routed experts with pread instead",
       ""},
      {{"-ctk", "--cache-type-k", "-ctv", "--cache-type-v", "-ctkd", "--cache-type-k-draft", "-ctvd",
        "--cache-type-v-draft"},
       "k3's sequence state (MLA latent cache, KDA recurrent state) has one fixed type; -c/--ctx-size bounds its "
       "size (k3 info DIR -c N prints it)",
       ""},
      {{"--jinja", "--no-jinja", "--chat-template", "--chat-template-file"},
       "k3 renders the K3 chat format itself, there is no template to choose (k3 tokenize -m DIR --chat FILE.json "
       "--show-text prints it); drop the flag",
       ""},
      {{"-ub", "--ubatch-size"}, "k3 has no micro-batch: -b/--batch-size sets the prompt tokens per forward call", ""},
      {{"-tb", "--threads-batch", "-td", "--threads-draft", "-tbd", "--threads-batch-draft"},
       "-t/--threads sets the threads of prompt processing and generation alike",
       ""},
      {{"-s"}, "k3 spells it --seed N", ""},
      {{"-sys", "--system-prompt"}, "k3 chat spells it --system TEXT", ""},
      {{"-a"}, "k3 serve spells it --alias NAME", ""},
      {{"-to"}, "k3 serve spells it --timeout SECONDS", ""},
      {{"--threads-http"}, "k3 serve spells it --http-threads N", ""},
  };
  return t;
}

const LlamaFlag* find_llama_flag(const std::string& name) {
  for (const LlamaFlag& f : llama_flags())
    if (std::find(f.names.begin(), f.names.end(), name) != f.names.end()) return &f;
  return nullptr;
}

/// "-1", "-0.5", ".5e3": a value, never a flag.
bool is_number(const std::string& s) {
  std::size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (i == s.size()) return false;
  return std::isdigit(static_cast<unsigned char>(s[i])) ||
         (s[i] == '.' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])));
}

/// The option of `sub` spelled `name` ("--temp", "-c"), or null.
const CLI::Option* find_option(const CLI::App& sub, const std::string& name) {
  for (const CLI::Option* op : sub.get_options()) {
    if (name.rfind("--", 0) == 0) {
      const auto& l = op->get_lnames();
      if (std::find(l.begin(), l.end(), name.substr(2)) != l.end()) return op;
    } else if (name.size() == 2) {
      const auto& s = op->get_snames();
      if (std::find(s.begin(), s.end(), name.substr(1)) != s.end()) return op;
    }
  }
  return nullptr;
}

bool has_positional(const CLI::App& sub) {
  for (const CLI::Option* op : sub.get_options())
    if (op->get_positional()) return true;
  return false;
}

std::string title(const CLI::App& sub) { return sub.get_parent() ? "k3 " + sub.get_name() : "k3"; }

/// Every spelling `sub` accepts, with dashes: its long and short names and the aliases.
std::vector<std::string> spellings(const CLI::App& sub) {
  std::vector<std::string> v;
  for (const CLI::Option* op : sub.get_options()) {
    for (const auto& l : op->get_lnames()) v.push_back("--" + l);
    for (const auto& s : op->get_snames()) v.push_back("-" + s);
  }
  for (const auto& [alias, target] : aliases())
    if (find_option(sub, target)) v.push_back(alias);
  return v;
}

/// The closest candidates to `word` ("did you mean"), empty when none is near: edit distance of
/// at most 1 (words up to 4 letters), 2 (up to 8) or 3, or one a prefix of the other (3+ letters).
std::vector<std::string> closest(const std::string& word, const std::vector<std::string>& candidates) {
  auto bare = [](const std::string& s) {
    const std::size_t i = s.find_first_not_of('-');
    return i == std::string::npos ? std::string() : s.substr(i);
  };
  const std::string w = bare(word);
  if (w.size() < 2) return {};
  const std::size_t limit = w.size() <= 4 ? 1 : w.size() <= 8 ? 2 : 3;
  double best = 1e9;
  std::vector<std::string> out;
  for (const std::string& c : candidates) {
    const std::string b = bare(c);
    if (b.size() < 2) continue;
    double d = static_cast<double>(edit_distance(w, b));
    const bool prefix = (w.size() >= 3 && b.rfind(w, 0) == 0) || (b.size() >= 3 && w.rfind(b, 0) == 0);
    if (prefix) d = std::min(d, 0.5);
    else if (d > static_cast<double>(limit)) continue;
    if (d < best) {
      best = d;
      out.clear();
    }
    if (d == best && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  if (out.size() > 3) out.resize(3);
  return out;
}

std::string or_list(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i == 0 ? "" : i + 1 == v.size() ? " or " : ", ") + v[i];
  return s;
}

std::string error_text(const CLI::App& app, const CLI::ParseError& e);

std::vector<const CLI::App*> all_subcommands(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App*) { return true; });
}

[[noreturn]] void unknown_flag(const CLI::App& app, const CLI::App& sub, const std::string& token,
                               const std::string& name) {
  std::string msg = title(sub) + " has no flag " + name;
  std::vector<std::string> others;
  if (sub.get_parent())
    for (const CLI::App* s : all_subcommands(app))
      if (s != &sub && find_option(*s, name)) others.push_back(s->get_name());
  if (!others.empty()) {
    std::string list = or_list(others);
    if (const std::size_t at = list.rfind(" or "); at != std::string::npos) list.replace(at, 4, " and ");
    msg += " (k3 " + list + (others.size() == 1 ? " has it)" : " have it)");
  }
  const auto near = closest(name, spellings(sub));
  if (!near.empty()) {
    msg += "; did you mean " + or_list(near) + "?";
  } else if (name.size() > 2 && name[1] != '-') {
    // "-fprompt.txt": a short flag with its value attached.
    const CLI::Option* op = find_option(sub, name.substr(0, 2));
    if (op && op->get_items_expected_min() > 0)
      msg += "; to give " + name.substr(0, 2) + " a value, put a space: " + name.substr(0, 2) + " " + token.substr(2);
  }
  throw k3::Error(msg + " (" + title(sub) + " --help lists the flags)");
}

}  // namespace

std::size_t edit_distance(const std::string& a, const std::string& b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i)
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

CheckedArgs check_args(const CLI::App& app, const std::vector<std::string>& args) {
  CheckedArgs out;
  const CLI::App* sub = &app;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string t = args[i];
    if (t == "--") {  // the rest are values
      out.args.insert(out.args.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    if (t.size() < 2 || t[0] != '-' || is_number(t)) {
      if (sub == &app && !t.empty() && t[0] != '-') {
        const CLI::App* found = nullptr;
        std::vector<std::string> names;
        for (const CLI::App* s : all_subcommands(app)) {
          names.push_back(s->get_name());
          if (s->get_name() == t) found = s;
        }
        if (!found) {
          std::string msg = "unknown subcommand '" + t + "'";
          const auto near = closest(t, names);
          if (!near.empty()) msg += "; did you mean " + or_list(near) + "?";
          std::string all;
          for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
          throw k3::Error(msg + " (subcommands: " + all + "; k3 --help)");
        }
        sub = found;
      } else if (sub != &app && !t.empty() && t[0] != '-' && !has_positional(*sub)) {
        throw k3::Error(title(*sub) + " takes no positional argument, found '" + t +
                        "' (a value goes after its flag; " + title(*sub) + " --help lists the flags)");
      }
      out.args.push_back(t);
      continue;
    }
    const std::size_t eq = t.find('=');
    std::string name = t.substr(0, eq);
    if (auto a = aliases().find(name); a != aliases().end()) {
      name = a->second;
      t = name + (eq == std::string::npos ? "" : t.substr(eq));
    }
    const bool is_long = name.rfind("--", 0) == 0;
    const CLI::Option* op = (is_long || name.size() == 2) ? find_option(*sub, name) : nullptr;
    if (!op && !is_long && name.size() > 2) {
      // "-n64", "-c=4096", "-t-1": a short flag with a number attached is CLI11's; letters are not.
      const CLI::Option* s = find_option(*sub, t.substr(0, 2));
      auto digit = [&](std::size_t k) { return k < t.size() && std::isdigit(static_cast<unsigned char>(t[k])); };
      if (s && s->get_items_expected_min() > 0 && (digit(2) || t[2] == '=' || (t[2] == '-' && digit(3)))) {
        out.args.push_back(t);
        continue;
      }
    }
    if (op) {
      if (name == "-h" || name == "--help") g_help_asked = true;
      out.args.push_back(t);
      if (eq == std::string::npos && op->get_items_expected_min() > 0) {
        for (int k = 0; k < op->get_items_expected_min() && i + 1 < args.size(); ++k) out.args.push_back(args[++i]);
        // a list option (--ram-gb 64 128) takes the words that follow, up to the next flag
        auto is_value = [&](const std::string& a) { return a.empty() || a[0] != '-' || is_number(a); };
        for (int k = op->get_items_expected_min();
             k < op->get_items_expected_max() && i + 1 < args.size() && is_value(args[i + 1]); ++k)
          out.args.push_back(args[++i]);
      }
      continue;
    }
    if (const LlamaFlag* f = find_llama_flag(name)) {
      if (!f->noop_in.empty() && sub->get_name() == f->noop_in && eq == std::string::npos) {
        out.notes.push_back(name + ": " + f->note);
        continue;
      }
      throw k3::Error(name + ": a llama.cpp flag that " + title(*sub) + " does not have; " + f->advice);
    }
    unknown_flag(app, *sub, t, name);
  }
  return out;
}

std::string flag_names(const CLI::Option& op) {
  std::string all = op.get_name(false, true);  // "-c,--ctx-size"
  std::replace(all.begin(), all.end(), ',', '/');
  const auto& l = op.get_lnames();
  for (const auto& [alias, target] : aliases())
    if (alias.rfind("--", 0) != 0 && op.get_snames().empty() &&
        std::find(l.begin(), l.end(), target.substr(2)) != l.end())
      all = alias + "/" + all;
  return all;
}

std::string parse_error_text(const CLI::App& app, const CLI::ParseError& e) {
  const auto subs = app.get_subcommands();
  return error_text(app, e) + " (see " + (subs.empty() ? "k3" : title(*subs.front())) + " --help)";
}

namespace {
std::string error_text(const CLI::App& app, const CLI::ParseError& e) {
  const std::string msg = e.what();
  auto option = [&](const std::string& name) -> const CLI::Option* {
    for (const CLI::App* sub : app.get_subcommands())
      if (const CLI::Option* op = sub->get_option_no_throw(name)) return op;
    return app.get_option_no_throw(name);
  };
  if (msg.rfind("-", 0) == 0) {  // "--ctx-size: ..." or "--model is required"
    const std::size_t end = std::min(msg.find(": "), msg.find(" is required"));
    if (end != std::string::npos)
      if (const CLI::Option* op = option(msg.substr(0, end))) {
        std::string rest = msg.substr(end);
        if (rest.find(" required ") != std::string::npos && rest.size() > 8 &&
            rest.compare(rest.size() - 8, 8, " missing") == 0)
          rest = ": needs a value (" + op->get_type_name().substr(0, op->get_type_name().find(':')) +
                 ")";                                                   // CLI11: "1 required TEXT missing"
        const std::string most = ": At Most 1 required but received ";  // CLI11: given twice
        if (rest.rfind(most, 0) == 0) rest = ": given " + rest.substr(most.size()) + " times, expected once";
        // CLI::IsMember: "q9 not in {bf16,q8,q4}"
        const std::size_t in = rest.find(" not in {");
        if (in != std::string::npos && rest.back() == '}') {
          std::string set = rest.substr(in + 9, rest.size() - in - 10);
          std::replace(set.begin(), set.end(), ',', ' ');
          rest = ": expected one of " + set + ", found '" + rest.substr(2, in - 2) + "'";
        }
        return flag_names(*op) + rest;
      }
    return msg;
  }
  const std::string conv = "Could not convert: ";
  if (msg.rfind(conv, 0) == 0) {  // "Could not convert: --temp = abc"
    const std::size_t sep = msg.find(" = ", conv.size());
    if (sep != std::string::npos)
      if (const CLI::Option* op = option(msg.substr(conv.size(), sep - conv.size()))) {
        const std::string type = op->get_type_name();
        const std::string what = type == "INT"       ? "an integer"
                                 : type == "UINT"    ? "a non-negative integer"
                                 : type == "FLOAT"   ? "a number"
                                 : type == "BOOLEAN" ? "true or false"
                                                     : type;
        return flag_names(*op) + ": expected " + what + ", found '" + msg.substr(sep + 3) + "'";
      }
    return msg;
  }
  const std::string allowed = " is not an allowed value for ";
  if (const std::size_t at = msg.find(allowed); msg.rfind("The value ", 0) == 0 && at != std::string::npos)
    if (const CLI::Option* op = option(msg.substr(at + allowed.size())))
      return flag_names(*op) + ": '" + msg.substr(10, at - 10) + "' is not an allowed value";
  if (msg == "A subcommand is required") {
    std::string all;
    for (const CLI::App* s : all_subcommands(app)) all += (all.empty() ? "" : ", ") + s->get_name();
    return "a subcommand is required: " + all;
  }
  return msg;
}
}  // namespace

std::string model_dir_problem(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  const auto st = fs::status(p, ec);
  if (fs::is_directory(st)) return {};
  const std::string expected = "(expected a K3 checkpoint directory: config.json, *.safetensors, tiktoken.model)";
  if (path.empty()) return "empty path " + expected;
  if (st.type() == fs::file_type::none) return "'" + path + "' cannot be read (" + ec.message() + ") " + expected;
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  bool gguf = ext == ".gguf";
  if (fs::is_regular_file(st)) {  // never open a FIFO or a device here: it could block
    std::ifstream f(p, std::ios::binary);
    char magic[4] = {};
    gguf = gguf || (f.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0);
  }
  if (gguf)
    return "'" + path + "' " + (fs::exists(st) ? "is a GGUF file" : "does not exist, and names a GGUF file") +
           "; k3 reads the safetensors checkpoint folder; GGUF is export-only (python -m tools.gguf_export "
           "writes it for llama.cpp)";
  if (!fs::exists(st)) return "'" + path + "' does not exist " + expected;
  std::string msg = "'" + path + "' is not a directory " + expected;
  const fs::path parent = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  if (fs::is_regular_file(st) && fs::exists(parent / "config.json", ec))
    msg += "; pass the folder that holds it: " + parent.string();
  return msg;
}

void add_path_checks(CLI::App& app) {
  const CLI::Validator dir([](std::string& path) { return g_help_asked ? std::string() : model_dir_problem(path); },
                           "");
  const CLI::Validator state(
      [](std::string& path) -> std::string {
        std::error_code ec;
        if (g_help_asked || std::filesystem::exists(path, ec)) return {};
        return "'" + path + "' does not exist (expected a file written by --state-save)";
      },
      "");
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    for (const char* name : {"--model", "--draft-model"})
      if (CLI::Option* op = sub->get_option_no_throw(name)) op->check(dir);
    if (CLI::Option* op = sub->get_option_no_throw("--state-load")) op->check(state);
  }
}

}  // namespace k3cli
