// Progress of a long operation reported to the caller (the library prints nothing): `what` names
// the step ("shard headers", "trunk quantization", "prefill"), `done` of `total` units so far.
// A step reports done = 0 when it starts (so a display can time it) and done == total when it
// completes.
#pragma once
#include <cstdint>
#include <functional>
#include <string_view>

namespace k3 {

using ProgressFn = std::function<void(std::string_view what, int64_t done, int64_t total)>;

}  // namespace k3
