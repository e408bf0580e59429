// Asking a Python trainer which flags it accepts, as the adapters of torchtitan and Megatron-LM
// do before they write its command line: its `--help`, run once with a time limit and kept in
// the temp folder under what it depends on (the Python, the package's path, its sources' time),
// since Python with torch takes seconds to start and `meshtest list` should not.
#pragma once

#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace meshtest {

// Runs `argv` (argv[0] looked up in PATH when it has no '/') with stdin closed and a time limit;
// its stdout and stderr together, or nullopt when it could not start, failed or hung, with `why`
// (may be null) saying which, ending with its last line of output.
std::optional<std::string> program_output(const std::vector<std::string>& argv, int seconds, std::string* why);

// program_output, kept in the temp folder under `id`: a later call with the same id reads it
// back instead of running `argv`. `id` must name everything the answer depends on.
std::optional<std::string> cached_program_output(const std::string& id, const std::vector<std::string>& argv,
                                                 int seconds, std::string* why);

// The newest modification time of the .py files directly in `dirs` (missing ones are skipped),
// for an id that changes when the trainer's sources do.
long long newest_python_source(const std::vector<std::filesystem::path>& dirs);

// A flag as a parser accepts it either way: `--a.b-c` -> "a.b_c".
std::string normalized_flag(std::string flag);

// The flags a --help text lists, normalized; a boolean's `--x.no_y` (`--no-y`) also counts as
// `--x.y` (`--y`).
std::set<std::string> flags_in_help(const std::string& help);

}  // namespace meshtest
