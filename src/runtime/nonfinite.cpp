#include "runtime/nonfinite.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "io/config.h"
#include "model/dump.h"

namespace k3 {

namespace fs = std::filesystem;

int64_t first_nonfinite(std::span<const float> x) {
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x[i])) return static_cast<int64_t>(i);
  return -1;
}

namespace {

// Reads an npy v1.0 float32 file written by DumpSink: returns false for other dtypes.
bool read_npy_f32(const fs::path& p, std::vector<float>& data, std::vector<int64_t>& shape) {
  std::ifstream f(p, std::ios::binary);
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) return false;
  uint16_t hl = 0;
  unsigned char b[2];
  if (!f.read(reinterpret_cast<char*>(b), 2)) return false;
  hl = static_cast<uint16_t>(b[0] | (b[1] << 8));
  std::string h(hl, '\0');
  if (!f.read(h.data(), hl)) return false;
  if (h.find("'<f4'") == std::string::npos) return false;
  shape.clear();
  const auto lp = h.find("'shape': (");
  if (lp == std::string::npos) return false;
  int64_t numel = 1;
  for (std::size_t i = lp + 10; i < h.size() && h[i] != ')';) {
    if (h[i] >= '0' && h[i] <= '9') {
      int64_t v = 0;
      while (i < h.size() && h[i] >= '0' && h[i] <= '9') v = v * 10 + (h[i++] - '0');
      shape.push_back(v);
      numel *= v;
    } else {
      ++i;
    }
  }
  data.resize(static_cast<std::size_t>(numel));
  return static_cast<bool>(f.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(numel * 4)));
}

}  // namespace

std::string locate_nonfinite(const Model& model, std::span<const int32_t> tokens, uint64_t max_dump_bytes) {
  const ModelConfig& c = model.config();
  // floats per token written by a dump: ~6 [D] tensors per layer, plus logits and the mixes
  const double per_token = (6.0 * c.num_hidden_layers + 4.0) * c.hidden_size + c.vocab_size +
                           2.0 * c.num_hidden_layers * (c.num_hidden_layers / std::max(1, c.attn_res_block_size) + 2);
  const double bytes = per_token * 4.0 * static_cast<double>(tokens.size());
  const std::string hint = "run `k3 logits -m DIR --ids ... --dump DIR` to name the first non-finite intermediate";
  if (tokens.empty()) return hint;
  if (bytes > static_cast<double>(max_dump_bytes)) return "replay too large to trace here; " + hint;
  char tmpl[] = "/tmp/k3-nonfinite-XXXXXX";
  const fs::path tmp_base = fs::temp_directory_path();
  std::string t = (tmp_base / "k3-nonfinite-XXXXXX").string();
  std::vector<char> buf(t.begin(), t.end());
  buf.push_back('\0');
  const char* made = ::mkdtemp(buf.data());
  if (!made) made = ::mkdtemp(tmpl);
  if (!made) return hint;
  const fs::path dir(made);
  std::string found, last, replay_error;
  try {
    DumpSink sink(dir);
    SequenceState seq = model.new_sequence();
    try {
      model.forward(seq, tokens, /*all_logits=*/true, &sink);
    } catch (const std::exception& e) {
      replay_error = e.what();
    }
    std::vector<float> data;
    std::vector<int64_t> shape;
    for (const std::string& name : sink.names()) {
      last = name;
      if (!read_npy_f32(dir / (name + ".npy"), data, shape)) continue;
      const int64_t i = first_nonfinite(data);
      if (i < 0) continue;
      const int64_t row = shape.size() >= 2 && shape[1] > 0 ? i / shape[1] : 0;
      char v[32];
      std::snprintf(v, sizeof v, "%g", static_cast<double>(data[static_cast<std::size_t>(i)]));
      found = "first non-finite intermediate: " + name + " (position " + std::to_string(row) + ", value " + v + ")";
      break;
    }
  } catch (const std::exception&) {
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (!found.empty()) return found;
  if (!replay_error.empty())
    return "every intermediate up to " + (last.empty() ? std::string("the embedding") : last) +
           " is finite; the pass then failed: " + replay_error;
  return "every named intermediate is finite on replay";
}

std::string explain_forward_error(const std::exception& e, const Model& model, std::span<const int32_t> tokens) {
  const std::string m = e.what();
  if (m.find("NaN") == std::string::npos && m.find("nan") == std::string::npos && m.find("Inf") == std::string::npos &&
      m.find("finite") == std::string::npos)
    return m;
  if (model.comm().size() > 1)
    return m + "; run it as one process to name the first non-finite intermediate (k3 logits --dump)";
  return m + "; " + locate_nonfinite(model, tokens);
}

}  // namespace k3
