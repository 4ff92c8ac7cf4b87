#include "io/safetensors.h"

#include <algorithm>
#include <string_view>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/read_file.h"
#include "io/json_util.h"

namespace k3 {

using nlohmann::json;

namespace {

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Non-negative integer from a JSON number; false when not an integer >= 0.
bool as_u64(const json& j, uint64_t& out) {
  if (j.is_number_unsigned()) {
    out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer()) {
    int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

SafetensorsEntry parse_entry(const std::string& name, const json& v, uint64_t data_size, uint64_t data_start,
                             const std::string& origin) {
  const std::string where = origin + ": safetensors header: tensor '" + name + "': ";
  if (!v.is_object()) throw Error(where + "expected an object, found " + json_type_name(v));
  SafetensorsEntry e;
  e.name = name;
  auto it = v.find("dtype");
  if (it == v.end()) throw Error(where + "missing \"dtype\"");
  if (!it->is_string()) throw Error(where + "\"dtype\" must be a string, found " + json_type_name(*it));
  const auto& ds = it->get_ref<const std::string&>();
  auto dt = dtype_from_name(ds);
  if (!dt)
    throw Error(where + "unknown dtype \"" + ds +
                "\" (expected one of BF16 F16 F32 F64 I8 U8 I16 I32 I64 BOOL F8_E4M3 F8_E5M2)");
  e.dtype = *dt;

  it = v.find("shape");
  if (it == v.end()) throw Error(where + "missing \"shape\"");
  if (!it->is_array()) throw Error(where + "\"shape\" must be an array, found " + json_type_name(*it));
  const std::string shape_str = it->dump();
  uint64_t numel = 1;
  bool overflow = false;
  for (size_t i = 0; i < it->size(); ++i) {
    uint64_t d;
    if (!as_u64((*it)[i], d) || d > static_cast<uint64_t>(INT64_MAX))
      throw Error(where + "shape[" + std::to_string(i) + "] must be a non-negative integer, found " + (*it)[i].dump());
    e.shape.push_back(static_cast<int64_t>(d));
    auto m = checked_mul(numel, d);
    if (!m) overflow = true;
    else numel = *m;
  }
  // A zero dimension makes the product 0 regardless of earlier overflow.
  if (std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end()) {
    numel = 0;
    overflow = false;
  }
  auto bytes = overflow ? std::nullopt : checked_mul(numel, dtype_size(e.dtype));

  it = v.find("data_offsets");
  if (it == v.end()) throw Error(where + "missing \"data_offsets\"");
  uint64_t b = 0, en = 0;
  if (!it->is_array() || it->size() != 2 || !as_u64((*it)[0], b) || !as_u64((*it)[1], en))
    throw Error(where + "\"data_offsets\" must be [begin, end] of non-negative integers, found " + it->dump());
  if (b > en) throw Error(where + "data_offsets begin " + std::to_string(b) + " > end " + std::to_string(en));
  if (en > data_size)
    throw Error(where + "data_offsets [" + std::to_string(b) + ", " + std::to_string(en) +
                ") outside the data region of " + std::to_string(data_size) + " bytes (file truncated? the file has " +
                std::to_string(data_start + data_size) + " bytes, this tensor needs " +
                std::to_string(data_start + en) + ")");
  if (!bytes) throw Error(where + "shape " + shape_str + ": byte count overflows 64 bits");
  if (*bytes != en - b)
    throw Error(where + "shape/bytes mismatch: " + std::string(dtype_name(e.dtype)) + " shape " + shape_str +
                " needs " + std::to_string(*bytes) + " bytes but data_offsets span " + std::to_string(en - b));
  e.offset = data_start + b;
  e.nbytes = en - b;
  return e;
}

}  // namespace

SafetensorsHeader parse_safetensors(std::span<const uint8_t> bytes, const std::string& origin) {
  return parse_safetensors_prefix(bytes, bytes.size(), origin);
}

SafetensorsHeader parse_safetensors_prefix(std::span<const uint8_t> bytes, uint64_t file_size,
                                           const std::string& origin) {
  if (file_size < 8 || bytes.size() < 8)
    throw Error(origin + ": truncated safetensors file: " + std::to_string(file_size) +
                " bytes, need at least 8 for the header length");
  SafetensorsHeader h;
  h.header_len = read_u64_le(bytes.data());
  const uint64_t avail = file_size - 8;
  if (h.header_len > avail)
    throw Error(origin + ": safetensors header length " + std::to_string(h.header_len) +
                " exceeds file size - 8 = " + std::to_string(avail) + " (truncated or not safetensors)");
  if (h.header_len > kSafetensorsMaxHeader)
    throw Error(origin + ": safetensors header length " + std::to_string(h.header_len) + " exceeds the limit of " +
                std::to_string(kSafetensorsMaxHeader) + " bytes");
  if (bytes.size() - 8 < h.header_len)
    throw Error(origin + ": safetensors header of " + std::to_string(h.header_len) + " bytes not fully read (" +
                std::to_string(bytes.size() - 8) + " bytes available)");
  h.data_start = 8 + h.header_len;
  const uint64_t data_size = avail - h.header_len;
  std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), h.header_len);
  json j = parse_json_strict(text, origin + ": safetensors header");
  if (!j.is_object()) throw Error(origin + ": safetensors header must be a JSON object, found " + json_type_name(j));
  h.entries.reserve(j.size());
  for (auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      if (!v.is_object())
        throw Error(origin + ": safetensors header: \"__metadata__\" must be an object, found " + json_type_name(v));
      for (auto& [k, s] : v.items()) {
        if (!s.is_string())
          throw Error(origin + ": safetensors header: \"__metadata__\"[\"" + k + "\"] must be a string, found " +
                      json_type_name(s));
        h.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    if (name.empty()) throw Error(origin + ": safetensors header: empty tensor name");
    h.entries.push_back(parse_entry(name, v, data_size, h.data_start, origin));
  }
  std::sort(h.entries.begin(), h.entries.end(),
            [](const auto& a, const auto& b) { return a.offset != b.offset ? a.offset < b.offset : a.name < b.name; });
  // Overlap: ranges sorted by start; zero-length ranges overlap nothing.
  const SafetensorsEntry* prev = nullptr;
  for (const auto& e : h.entries) {
    if (e.nbytes == 0) continue;
    if (prev && e.offset < prev->offset + prev->nbytes)
      throw Error(origin + ": safetensors header: tensors '" + prev->name + "' and '" + e.name +
                  "' overlap (data_offsets [" + std::to_string(prev->offset - h.data_start) + ", " +
                  std::to_string(prev->offset + prev->nbytes - h.data_start) + ") and [" +
                  std::to_string(e.offset - h.data_start) + ", " + std::to_string(e.offset + e.nbytes - h.data_start) +
                  "))");
    prev = &e;
  }
  return h;
}

SafetensorsHeader read_safetensors_header(const std::filesystem::path& path, uint64_t* file_size) {
  const std::string origin = path.string();
  // type first: open() on a FIFO would block (core/read_file.h)
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error(origin + ": cannot open: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw Error(origin + ": is a " + file_type_name(st.st_mode) + ", expected a regular file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(origin + ": cannot open: " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw Error(origin + ": changed type while being opened, expected a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (file_size) *file_size = size;
  auto pread_all = [&](uint8_t* dst, uint64_t n, uint64_t off) {
    uint64_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd, dst + got, n - got, static_cast<off_t>(off + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        throw Error(origin + ": read error at byte " + std::to_string(off + got) + ": " +
                    (r < 0 ? std::strerror(errno) : "unexpected end of file"));
      got += static_cast<uint64_t>(r);
    }
  };
  std::vector<uint8_t> buf(static_cast<std::size_t>(std::min<uint64_t>(size, 8)));
  pread_all(buf.data(), buf.size(), 0);
  if (size >= 8) {
    const uint64_t n = read_u64_le(buf.data());
    // the length checks of parse_safetensors_prefix, before anything is allocated
    if (n <= size - 8 && n <= kSafetensorsMaxHeader) {
      buf.resize(static_cast<std::size_t>(8 + n));
      pread_all(buf.data() + 8, n, 8);
    }
  }
  return parse_safetensors_prefix(buf, size, origin);
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path, bool map_data) {
  uint64_t size = 0;
  header_ = read_safetensors_header(path, &size);
  if (map_data) {
    file_ = std::make_unique<MappedFile>(path);
    // The header was checked against `size`: a file that shrank since would fault on access.
    if (file_->size() != size)
      throw Error(path.string() + ": changed size while being opened (" + std::to_string(size) + " bytes, then " +
                  std::to_string(file_->size()) + "); model files must not change while k3 runs");
  }
}

}  // namespace k3
