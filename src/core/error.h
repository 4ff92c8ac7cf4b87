// k3::Error — the one exception type of k3.cpp.
// Every message names what was being read (file, tensor, key or flag), what was
// expected and what was found. Tools catch it at the top, print one line, exit 1.
#pragma once
#include <stdexcept>
#include <string>

namespace k3 {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

}  // namespace k3
