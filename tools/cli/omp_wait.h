// OpenMP's wait policy for the k3 program. libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT
// once, when it is loaded (before main). Left unset, a worker that finishes its share of a
// parallel region spins (up to 300,000 iterations) before it sleeps; on a machine whose cores
// are busy with other processes the spinning workers take the CPU from the one that still has
// work, and K3-mini decoded 10-50x slower with all threads than with -t 1 (docs/performance.md,
// "Threads and load"). With passive waiting (sleep at once) the default thread count was never
// slower than -t 1 there. So, when the environment sets neither variable, the program sets
// OMP_WAIT_POLICY=passive and re-executes itself once so that libgomp reads it; a user's own
// OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept as it is.
#pragma once
#include <omp.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "kernels/threads.h"

namespace k3cli {

/// Marks a process started by apply_default_omp_wait_policy (so the policy is reported as the
/// program's default, not the user's).
inline constexpr const char* kOmpWaitMarker = "K3_OMP_WAIT_DEFAULT";

/// When neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set: sets OMP_WAIT_POLICY=passive and
/// re-executes /proc/self/exe with the same argv. Returns (doing nothing) when either is set;
/// also returns when the exec fails, and the run goes on with libgomp's default.
inline void apply_default_omp_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  if (std::getenv(kOmpWaitMarker)) return;  // already re-executed once: never loop
  ::setenv("OMP_WAIT_POLICY", "passive", 1);
  ::setenv(kOmpWaitMarker, "1", 1);
  ::execv("/proc/self/exe", argv);
  ::unsetenv("OMP_WAIT_POLICY");  // exec failed: libgomp keeps what it read at load
  ::unsetenv(kOmpWaitMarker);
}

/// The wait policy libgomp runs with, for the stats lines: "passive wait" (the default set by
/// apply_default_omp_wait_policy), "OMP_WAIT_POLICY=X" / "GOMP_SPINCOUNT=N" when the user set
/// them, "spin wait" (libgomp's default) otherwise.
inline std::string omp_wait_policy() {
  const char* p = std::getenv("OMP_WAIT_POLICY");
  const char* s = std::getenv("GOMP_SPINCOUNT");
  if (p && std::getenv(kOmpWaitMarker) && std::string(p) == "passive") return "passive wait";
  std::string r;
  if (p) r = std::string("OMP_WAIT_POLICY=") + p;
  if (s) r += (r.empty() ? "" : ", ") + std::string("GOMP_SPINCOUNT=") + s;
  return r.empty() ? "spin wait" : r;
}

/// "N (policy)": the worker count in effect and the wait policy, for the stats lines.
inline std::string threads_phrase() { return std::to_string(k3::num_threads()) + " (" + omp_wait_policy() + ")"; }

}  // namespace k3cli
