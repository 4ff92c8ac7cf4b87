// k3 — command-line front end. `k3 --help` lists the subcommands.
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "command.h"
#include "core/error.h"
#include "omp_wait.h"

namespace k3cli {
std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}
}  // namespace k3cli

namespace {

// CLI11 prefixes a validation error with the option's long name only ("--ctx-size: ..."); name
// it as the help does, short and long ("-c/--ctx-size: expected an integer >= 1, found '0'").
std::string flag_names_in(const CLI::App& app, const CLI::ParseError& e) {
  std::string msg = e.what();
  if (!dynamic_cast<const CLI::ValidationError*>(&e)) return msg;
  const std::size_t colon = msg.find(": ");
  if (colon == std::string::npos || msg.rfind("--", 0) != 0) return msg;
  const std::string lname = msg.substr(0, colon);
  for (const CLI::App* sub : app.get_subcommands()) {
    const CLI::Option* op = sub->get_option_no_throw(lname);
    if (!op) continue;
    std::string all = op->get_name(false, true);  // "-c,--ctx-size"
    std::replace(all.begin(), all.end(), ',', '/');
    return all + msg.substr(colon);
  }
  return msg;
}

}  // namespace

int main(int argc, char** argv) {
  k3cli::apply_default_omp_wait_policy(argv);  // before any parallel region (omp_wait.h)
  // The forward pass allocates per-layer activation buffers of T x width floats (hundreds of KiB
  // in prefill). glibc would serve each from a fresh mmap (or trim the heap after it) and the
  // kernel would zero-fill and fault in every page again on the next layer: measured 15-20% of
  // K3-mini prefill time. Keep freed memory in the heap instead (these buffers are bounded by
  // the prefill chunk; the weights are mmapped files, not malloc).
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  CLI::App app{"k3 — Kimi K3 inference engine"};
  app.require_subcommand(1);
  auto& cmds = k3cli::registry();
  std::sort(cmds.begin(), cmds.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (auto& c : cmds) c.setup(app.add_subcommand(c.name, c.help));
  // llama.cpp's multi-letter single-dash flags, which CLI11 cannot declare ("-np" would parse as
  // "-n p"): spelled as their long names before parsing.
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) {
    std::string a = argv[i];
    if (a == "-np") a = "--parallel";
    else if (a.rfind("-np=", 0) == 0) a = "--parallel=" + a.substr(4);
    else if (a == "-md") a = "--draft-model";
    else if (a.rfind("-md=", 0) == 0) a = "--draft-model=" + a.substr(4);
    args.push_back(std::move(a));
  }
  try {
    app.parse(args);  // CLI11 takes the arguments in reverse order
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, naming the flag (CLI11's message), and exit 1 like every other error.
    std::fprintf(stderr, "k3: error: %s (see k3 --help)\n", flag_names_in(app, e).c_str());
    return 1;
  } catch (const k3::Error& e) {
    std::fprintf(stderr, "k3: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "k3: error: out of memory (an allocation failed; inputs are bounded by --max-input-mib, "
                         "the state by -c/--ctx-size)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "k3: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
