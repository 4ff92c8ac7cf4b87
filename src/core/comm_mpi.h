// The MPI communicator (built with K3_MPI): k3::Comm over MPI_COMM_WORLD, using only the MPI
// standard API (MPI_Allgatherv / MPI_Bcast on bytes; no reduction ever runs inside MPI, spec
// distributed.md §4.2). The program (tools/cli) starts one MpiSession when an MPI launcher
// started it and passes session.world() down as a value (ModelOptions::comm).
#pragma once
#include <memory>

#include "core/comm.h"

namespace k3 {

/// MPI_Init_thread(MPI_THREAD_SERIALIZED) at construction (one thread at a time calls MPI: the
/// main thread, or `k3 serve`'s engine thread while the main thread waits; OpenMP threads run
/// between the calls), MPI_Finalize at destruction. MPI errors return codes
/// (MPI_ERRORS_RETURN) that become k3::Error naming the rank and the call. One per process.
class MpiSession {
 public:
  /// Errors: k3::Error when MPI was already initialized, or the library offers less than
  /// MPI_THREAD_SERIALIZED, or MPI_Init_thread fails.
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  /// The communicator of every rank the launcher started (MPI_COMM_WORLD).
  std::shared_ptr<Comm> world() const { return world_; }

 private:
  std::shared_ptr<Comm> world_;
};

}  // namespace k3
