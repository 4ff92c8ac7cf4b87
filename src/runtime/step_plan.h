// k3::StepPlan — what rank 0 broadcasts before each engine step of `mpirun -np N k3 serve`
// (docs/distributed.md "Serving across ranks"). Every rank runs the same Scheduler (scheduler.h,
// Options::group) over its own shard of the model: the same slots, prefix-cache index, samplers
// and drafters, so that each rank's engine makes the same batch and calls the same collectives.
// What only rank 0 sees — requests arriving over HTTP, cancellations by clients, /slots
// commands, the stop — reaches the other ranks as this plan, at the same point of the engine
// loop on every rank. The states themselves never travel: each rank keeps its own part.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/comm.h"
#include "runtime/scheduler.h"

namespace k3 {

struct StepPlan {
  /// The ranks end their engine loops (rank 0's scheduler stopped; no slot runs).
  bool stop = false;
  /// Requests admitted into free slots before this step, in admission order (the whole request:
  /// prompt ids, sampling with its seed and logit_bias, limits, stop ids, the constraint's spec;
  /// not its compiled form, which each rank compiles, nor images, refused under N ranks).
  std::vector<SeqRequest> admit;
  /// Slot ids whose running sequence ends as cancelled at this step (client gone, stop string).
  std::vector<int64_t> cancel;
  /// A /slots command (Scheduler::save_slot / restore_slot / erase_slot) run on every rank
  /// before admission: rank r > 0 uses the file Model::state_file names (`file`.rank<r>of<N>,
  /// its own part of the state).
  struct SlotOp {
    enum Kind : uint8_t { Save = 0, Restore = 1, Erase = 2 } kind = Save;
    int64_t id = 0;
    std::string file;
    std::string fingerprint;
  };
  std::vector<SlotOp> slot_ops;
};

/// The plan as bytes (little-endian, counts as uint64) and back. decode_plan errors: k3::Error
/// "step plan: truncated" / "bad ..." for bytes encode_plan did not write.
std::vector<uint8_t> encode_plan(const StepPlan& p);
StepPlan decode_plan(std::span<const uint8_t> bytes);

/// Collective: rank 0's `p` reaches every rank (two broadcasts: the size, then the bytes); on
/// other ranks `p` is replaced. Errors: the communicator's; decode_plan's.
void broadcast_plan(Comm& comm, StepPlan& p);


}  // namespace k3
