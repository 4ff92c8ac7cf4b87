// k3 — command-line front end. `k3 --help` lists the subcommands.
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <exception>

#include "command.h"
#include "core/error.h"

namespace k3cli {
std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}
}  // namespace k3cli

int main(int argc, char** argv) {
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, naming the flag (CLI11's message), and a non-zero exit.
    std::fprintf(stderr, "k3: error: %s (see k3 --help)\n", e.what());
    return e.get_exit_code() != 0 ? e.get_exit_code() : 1;
  } catch (const k3::Error& e) {
    std::fprintf(stderr, "k3: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "k3: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
