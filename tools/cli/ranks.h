// The ranks of this k3 process (docs/distributed.md). main() starts MPI when an MPI launcher
// started the program (tools/exec_env.h launched_by_mpi) and sets world() once; every model the
// subcommands build gets it in ModelOptions::comm. Rank 0 alone writes stdout and output files;
// the other ranks' stdout and stderr go to /dev/null, and main prints their errors on the
// original stderr with the rank.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "core/comm.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "model/k3_model.h"

namespace k3cli {

/// An error every rank of the group raises at the same point with the same text (a refusal
/// decided from the flags or from all-gathered facts): rank 0 alone prints it and the group
/// ends cleanly with exit status 1, instead of aborting.
class GroupError : public k3::Error {
 public:
  using k3::Error::Error;
};

/// This process's communicator: the MPI world, or the size-1 communicator (set by main before
/// any subcommand runs).
std::shared_ptr<k3::Comm>& world();

/// True on rank 0 (the one that writes stdout and files).
inline bool is_rank0() { return world()->rank() == 0; }

/// The identity of this k3 binary: FNV-1a 64 of /proc/self/exe, 16 hex digits (what ranks
/// compare at start-up). Errors: k3::Error when the executable cannot be read.
std::string build_id();

/// After a model is built on every rank (collective; nothing in one process): the start-up
/// check of runtime/model_fingerprint.h check_ranks_agree, then rank 0 prints one stderr line per
/// rank with its experts, vocabulary rows and weight bytes. Errors: GroupError with
/// ranks_disagreement's message; the communicator's errors.
void check_ranks(const k3::Checkpoint& ck, const k3::Model& model);

/// Collective: checks that every rank was given the same token ids (`parts`: e.g. the prompt,
/// a loaded state's ids, the stop ids), since each rank reads its own inputs and tokenizer and a
/// difference would desynchronise the ranks' collectives. Each rank all-gathers a 64-bit FNV-1a
/// hash of the sizes and ids. Nothing in one process. Errors: GroupError naming the ranks that
/// differ from rank 0 and `what`; the communicator's errors.
void check_same_input(std::initializer_list<std::span<const int32_t>> parts, const std::string& what);

/// Collective (nothing in one process): rank 0's `got`, `flag` and `line` (e.g. a line read from
/// stdin: whether one was read, whether it was too long) reach every rank (two broadcasts).
/// Errors: the communicator's.
void share_line(bool& got, bool& flag, std::string& line);

/// Collective: every rank passes its own error text for one step ("" = it succeeded). When any
/// rank failed, every rank throws the same GroupError listing each failing rank's text (so the
/// group refuses together, however the ranks' timing goes); nothing happens in one process
/// except rethrowing a non-empty `error` as k3::Error.
void agree_ok(const std::string& error);

/// Refuses `what` (e.g. "k3 serve") under more than one rank: GroupError naming the subcommand and
/// docs/distributed.md.
void refuse_ranks(const std::string& what);

/// One stderr line (rank 0, N > 1 only) of the communicator's counters: collectives, MB sent and
/// received by rank 0 since start-up.
void print_comm_counters(const char* who);

}  // namespace k3cli
