#include "model/state_header.h"

#include "core/error.h"
#include "core/json_depth.h"

namespace k3 {

SequenceStateHeader parse_sequence_state_header(std::string_view text, const std::string& file) {
  const std::string where = "sequence state '" + file + "'";
  const JsonDepthScan scan = scan_json_depth(text);
  if (scan.exceeded) throw Error(where + ": header: " + json_depth_message(scan));
  nlohmann::ordered_json h;
  try {
    h = nlohmann::ordered_json::parse(text);
  } catch (const std::exception& e) {
    throw Error(where + ": header is not JSON: " + e.what());
  }
  SequenceStateHeader r;
  try {
    if (!h.is_object()) throw Error(where + ": header is not a JSON object");
    if (h.at("format") != "k3-sequence-state") throw Error(where + ": expected format k3-sequence-state");
    if (h.at("version") != kSequenceStateVersion)
      throw Error(where + ": format version " + h.at("version").dump() + ", this k3 reads version " +
                  std::to_string(kSequenceStateVersion) + " (save it again with this k3)");
    r.fingerprint = h.at("model_fingerprint").get<std::string>();
    r.ids = h.at("ids").get<std::vector<int32_t>>();
    r.extra_json = h.contains("extra") ? h.at("extra").dump() : std::string();
    r.n_past = h.at("n_past").get<int64_t>();
    if (h.contains("rank") || h.contains("ranks")) {
      r.rank = h.at("rank").get<int>();
      r.ranks = h.at("ranks").get<int>();
      if (r.ranks < 1 || r.rank < 0 || r.rank >= r.ranks)
        throw Error(where + ": header rank " + std::to_string(r.rank) + " of " + std::to_string(r.ranks) +
                    " is not a rank of the group");
    }
    r.layers = h.at("layers");
    if (!r.layers.is_array()) throw Error(where + ": header \"layers\" is not a list");
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": malformed header: " + e.what());
  }
  return r;
}

}  // namespace k3
