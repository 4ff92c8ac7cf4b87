// The JSON header of a sequence-state file (SequenceState::save / load, model/sequence_state.h), read
// and checked for form without a model: load() then checks the layers against the model.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace k3 {

/// The header format version SequenceState::save writes and load reads.
inline constexpr int kSequenceStateVersion = 2;  // 2: model fingerprint, ids, caller JSON, CRC-32

/// The fields of a sequence-state header.
struct SequenceStateHeader {
  int64_t n_past = 0;
  std::string fingerprint;        ///< "model_fingerprint"
  std::vector<int32_t> ids;       ///< "ids"
  std::string extra_json;         ///< "extra" printed as JSON text, or "" when absent
  int rank = 0, ranks = 1;        ///< "rank", "ranks": a rank's piece of a split state (absent: 0 of 1)
  nlohmann::ordered_json layers;  ///< "layers": an array (entries checked by the loader)
};

/// Parses the header text of state file `file`: {"format": "k3-sequence-state", "version": 2,
/// "n_past", "model_fingerprint", "ids", "extra" (optional, any JSON), "rank" and "ranks"
/// (optional, together: the piece of rank `rank` of `ranks` under the head split), "layers": [...]}.
/// Errors: k3::Error naming the file for text nested deeper than kMaxJsonDepth
/// (core/json_depth.h; naming the top-level key, e.g. "extra"), text that is not JSON, another
/// format or version, and missing or mistyped fields.
SequenceStateHeader parse_sequence_state_header(std::string_view text, const std::string& file);

}  // namespace k3
