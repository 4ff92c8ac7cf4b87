// The k3 command line before and around CLI11: llama.cpp spellings k3 accepts (-np, -md,
// --model-draft), llama.cpp flags k3 does not have (refused by name with what k3 offers instead),
// "did you mean" for unknown flags and subcommands, the path checks of -m/--model, --draft-model
// and --state-load (a GGUF file or a missing path is named before anything loads), and CLI11's
// parse errors worded with the flag's short and long names.
//
// CLI11 reads a single-dash token of several letters as a short flag with its value attached
// ("-ngl" = "-n gl", "-cb" = "-c b", "-hf" = "-h f"), so every such token is checked here first:
// only an exact k3 flag, a llama.cpp alias k3 accepts, or a short flag followed by a number
// ("-n64") reaches CLI11.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace k3cli {

struct CheckedArgs {
  std::vector<std::string> args;   ///< argv[1..] with the accepted aliases spelled as k3's long names
  std::vector<std::string> notes;  ///< one line each for stderr (flags accepted with no effect)
};

/// Checks argv[1..] (in order) against the subcommands declared on `app`. Errors: k3::Error
/// naming the flag: a llama.cpp flag k3 does not have ("-ngl/--n-gpu-layers: ... instead"), an
/// unknown flag or subcommand (with the closest k3 spelling when one is near).
CheckedArgs check_args(const CLI::App& app, const std::vector<std::string>& args);

/// The spellings of an option as the help shows them, with the llama.cpp alias k3 accepts:
/// "-m/--model", "-md/--draft-model", "-np/--parallel".
std::string flag_names(const CLI::Option& op);

/// The one-line text of a CLI11 parse error with the flag named as the help does
/// ("-c/--ctx-size: expected an integer >= 1, found '0'", "-m/--model is required",
/// "--temp: expected a number, found 'abc'"), ending "(see k3 SUBCOMMAND --help)".
std::string parse_error_text(const CLI::App& app, const CLI::ParseError& e);

/// Adds the path checks to the options of the subcommands of `app`: every -m/--model and
/// --draft-model must be a directory (a GGUF file, by extension or magic, is refused with "k3 reads
/// the safetensors checkpoint folder; GGUF is export-only"); --state-load must exist.
void add_path_checks(CLI::App& app);

/// The message of that check for `path`, empty when it is a directory.
std::string model_dir_problem(const std::string& path);

/// Optimal-string-alignment edit distance (insertions, deletions, substitutions, transpositions).
std::size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace k3cli
