#include "model/dump.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace k3 {

namespace {

void write_npy_file(const std::filesystem::path& file, const char* descr, const std::vector<int64_t>& shape,
                    const void* data, size_t elem_size) {
  std::string shp = "(";
  uint64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    shp += std::to_string(shape[i]);
    shp += (shape.size() == 1 || i + 1 < shape.size()) ? "," : "";
    if (i + 1 < shape.size()) shp += " ";
    n *= static_cast<uint64_t>(shape[i]);
  }
  shp += ")";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shp + ", }";
  // Pad so that magic(6) + version(2) + len(2) + header + '\n' is a multiple of 64.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(file, std::ios::binary | std::ios::trunc);
  if (!f) throw Error("dump: cannot open '" + file.string() + "' for writing");
  const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
  f.write(magic, 8);
  const uint16_t hl = static_cast<uint16_t>(header.size());
  const char len[2] = {static_cast<char>(hl & 0xFF), static_cast<char>(hl >> 8)};
  f.write(len, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n * elem_size));
  if (!f) throw Error("dump: write to '" + file.string() + "' failed");
}

}  // namespace

void write_npy_f32(const std::filesystem::path& file, const std::vector<int64_t>& shape, const float* data) {
  write_npy_file(file, "<f4", shape, data, 4);
}

DumpSink::DumpSink(std::filesystem::path dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw Error("dump: cannot create directory '" + dir_.string() + "': " + ec.message());
}

DumpSink::~DumpSink() {
  try {
    finish();
  } catch (...) {
  }
}

void DumpSink::write_npy(const std::string& name, const char* descr, const std::vector<int64_t>& shape,
                         const void* data, size_t elem_size) {
  if (name.empty() || name.find('/') != std::string::npos || name.find("..") != std::string::npos)
    throw Error("dump: invalid tensor name '" + name + "'");
  write_npy_file(dir_ / (name + ".npy"), descr, shape, data, elem_size);
  if (std::find(names_.begin(), names_.end(), name) == names_.end()) names_.push_back(name);
}

void DumpSink::add(const std::string& name, const std::vector<int64_t>& shape, const float* data) {
  write_npy(name, "<f4", shape, data, 4);
}

void DumpSink::add_i32(const std::string& name, const std::vector<int64_t>& shape, const int32_t* data) {
  write_npy(name, "<i4", shape, data, 4);
}

void DumpSink::finish() {
  nlohmann::json m;
  m["tensors"] = names_;
  std::ofstream f(dir_ / "manifest.json", std::ios::trunc);
  if (!f) throw Error("dump: cannot write '" + (dir_ / "manifest.json").string() + "'");
  f << m.dump(1) << "\n";
  if (!f) throw Error("dump: write to '" + (dir_ / "manifest.json").string() + "' failed");
}

}  // namespace k3
