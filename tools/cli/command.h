// Subcommand registry of the `k3` program. Each cmd_<name>.cpp defines one static
// k3cli::Registrar; main() adds every registered subcommand to the CLI11 app.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace k3cli {

struct Command {
  std::string name;
  std::string help;
  /// Declares options on `sub` and sets its callback. Errors: throw k3::Error (one line, exit 1).
  std::function<void(CLI::App* sub)> setup;
};

std::vector<Command>& registry();

struct Registrar {
  Registrar(std::string name, std::string help, std::function<void(CLI::App*)> setup) {
    registry().push_back({std::move(name), std::move(help), std::move(setup)});
  }
};

}  // namespace k3cli
