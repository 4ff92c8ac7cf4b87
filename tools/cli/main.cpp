// k3 — command-line front end. `k3 --help` lists the subcommands.
#include <malloc.h>
#include <unistd.h>

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
#include "ranks.h"
#include "tools/exec_env.h"
#ifdef K3_MPI
#include "core/comm_mpi.h"
#endif

namespace k3cli {
std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}
}  // namespace k3cli

namespace {

/// Where errors go: stderr, or on ranks other than 0 (whose stderr is /dev/null) a copy of the
/// original stderr made before the redirection.
FILE* g_errors = stderr;

/// The one error line: "k3: error: MSG" in one process, "k3: rank R: error: MSG" under N ranks.
void print_error(const char* msg) {
  const k3::Comm& w = *k3cli::world();
  if (w.size() > 1) std::fprintf(g_errors, "k3: rank %d: error: %s\n", w.rank(), msg);
  else std::fprintf(g_errors, "k3: error: %s\n", msg);
  std::fflush(g_errors);
}

/// run_cli's status after a GroupError: every rank stopped at the same point.
constexpr int kGroupFailed = 2;

/// Exit status 1 after an error: under N ranks the whole group ends at once (another rank may
/// be waiting in a collective for this one), except after a GroupError, where every rank
/// stopped at the same point and MPI finalizes normally.
int fail(int rc) {
  if (k3cli::world()->size() > 1 && rc != kGroupFailed) k3cli::world()->abort(1);
  return 1;
}

/// The subcommand's run (argument checks, parse, callback) with its errors printed as one line.
int run_cli(int argc, char** argv);

}  // namespace

int main(int argc, char** argv) {
  k3cli::apply_default_omp_wait_policy(argv);  // before any parallel region (omp_wait.h)
#ifdef K3_MPI
  // Under an MPI launcher the ranks start MPI (MPI_THREAD_SERIALIZED; finalized when `mpi` ends);
  // alone, the process never touches MPI.
  std::unique_ptr<k3::MpiSession> mpi;
  if (k3tools::launched_by_mpi()) {
    try {
      mpi = std::make_unique<k3::MpiSession>(&argc, &argv);
    } catch (const k3::Error& e) {
      print_error(e.what());
      return 1;
    }
    k3cli::world() = mpi->world();
  }
#else
  // N copies of a one-process run would each compute everything; a launcher's one task is one process
  if (k3tools::launched_by_mpi() && k3tools::launched_group_size() != 1) {
    print_error(
        "started by an MPI launcher, but this k3 was built without MPI (K3_MPI=OFF); build with "
        "-DK3_MPI=ON (docs/distributed.md) or run it without mpirun");
    return 1;
  }
#endif
  if (k3cli::world()->rank() != 0) {  // only rank 0 writes stdout and stderr (errors aside)
    const int saved = dup(STDERR_FILENO);
    if (saved >= 0) g_errors = fdopen(saved, "w");
    if (!g_errors) g_errors = stderr;
    if (!std::freopen("/dev/null", "w", stdout) || !std::freopen("/dev/null", "w", stderr)) {
      print_error("cannot redirect stdout/stderr of this rank to /dev/null");
      return fail(1);
    }
  }
  const int rc = run_cli(argc, argv);
  return rc == 0 ? 0 : fail(rc);
}

namespace {

int run_cli(int argc, char** argv) {
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
    print_error(e.what());
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
    print_error(k3cli::parse_error_text(app, e).c_str());
    return 1;
  } catch (const k3cli::GroupError& e) {
    if (k3cli::is_rank0()) print_error(e.what());
    return kGroupFailed;
  } catch (const k3::Error& e) {
    print_error(e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    print_error(
        "out of memory (an allocation failed; inputs are bounded by --max-input-mib, the state by "
        "-c/--ctx-size)");
    return 1;
  } catch (const std::exception& e) {
    print_error(e.what());
    return 1;
  }
  return 0;
}

}  // namespace
