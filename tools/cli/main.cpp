// k3 — command-line front end. `k3 --help` lists the subcommands.
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "command.h"
#include "flag_advice.h"
#include "core/error.h"
#include "omp_wait.h"

namespace k3cli {
std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}
}  // namespace k3cli

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
  k3cli::add_path_checks(app);
  std::vector<std::string> args;
  try {
    // llama.cpp's spellings: the aliases k3 accepts are rewritten, the flags it does not have are
    // refused by name, before CLI11 could read "-ngl" as "-n gl".
    k3cli::CheckedArgs checked = k3cli::check_args(app, std::vector<std::string>(argv + 1, argv + argc));
    for (const std::string& n : checked.notes) std::fprintf(stderr, "k3: note: %s\n", n.c_str());
    args.assign(checked.args.rbegin(), checked.args.rend());  // CLI11 takes the arguments in reverse order
  } catch (const k3::Error& e) {
    std::fprintf(stderr, "k3: error: %s\n", e.what());
    return 1;
  }
  try {
    app.parse(args);  // CLI11 takes the arguments in reverse order
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, naming the flag (CLI11's message), and exit 1 like every other error.
    std::fprintf(stderr, "k3: error: %s\n", k3cli::parse_error_text(app, e).c_str());
    return 1;
  } catch (const k3::Error& e) {
    std::fprintf(stderr, "k3: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "k3: error: out of memory (an allocation failed; inputs are bounded by --max-input-mib, "
                 "the state by -c/--ctx-size)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "k3: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
