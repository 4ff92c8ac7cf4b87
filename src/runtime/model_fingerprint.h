// A model fingerprint: 16 hex digits that change when anything that decides the bits of a
// forward pass changes — the checkpoint (config.json, every tensor's name, dtype, shape and a
// sample of its bytes: first, middle and last 64 of each tensor) and the numeric path (the
// model's resolved execution config, ModelOptions::exec: kernel ISA, MXFP4 path, numerics mode,
// Fast vs Reference kernels; the prefill chunk, trunk quantization). Stored in prefix-cache disk
// entries and sequence-state files so a state of another model, or of the same model computed another way, is never resumed.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "io/checkpoint.h"
#include "model/k3_model.h"

namespace k3 {

/// FNV-1a 64 over bytes, continuing from `h` (the offset basis by default). Not cryptographic:
/// collisions are guarded by comparing the ids themselves (prefix_cache.h).
uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 1469598103934665603ull);

/// The fingerprint of `model` bound to `ck` (which must be the checkpoint the model binds).
/// Reads config.json, every tensor header and the first, middle and last 64 bytes of each
/// tensor's data (a few pages per tensor: cheap even for the full K3), each sample hashed
/// alone and the digests mixed in tensor order. Under N ranks (model.comm()) it is a collective
/// call: a routed expert's samples are read by the rank holding it and all-gathered, so no
/// rank touches another's experts and every rank gets the single-process value.
/// Errors: k3::Error when config.json cannot be read; the communicator's errors.
std::string model_fingerprint(const Checkpoint& ck, const Model& model);

/// Start-up check of a model split over ranks (a collective call; nothing to do in one
/// process): every rank hashes what it can see alone — `build_id` (the k3 binary), config.json,
/// every tensor's name, dtype and shape, samples of the tensors every rank reads (all but the
/// routed experts) and the execution config — and compares them with rank 0's. Errors:
/// k3::Error on every rank when any differs, naming each differing rank, its checkpoint
/// directory and rank 0's, and what differs; the communicator's errors.
void check_ranks_agree(const Checkpoint& ck, const Model& model, const std::string& build_id);
/// check_ranks_agree's comparison without the throw: "" when every rank agrees with rank 0,
/// else the message (the same text on every rank).
std::string ranks_disagreement(const Checkpoint& ck, const Model& model, const std::string& build_id);

}  // namespace k3
