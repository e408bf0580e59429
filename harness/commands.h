// meshtest's subcommands, as main.cpp wires them: each add_<name> adds its subcommand and options
// to the app and returns the action, one call into the floor that does the work. No logic here
// either: a subcommand that decides something has a lower floor to decide it.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace meshtest {

// A subcommand's action, run when the command line named it. Its options live in the closure.
struct Subcommand {
  CLI::App* cmd;
  std::function<int()> action;
};

// run_commands.cpp: a run and what reads it back.
Subcommand add_run(CLI::App& app, const char* argv0);
Subcommand add_list(CLI::App& app);
Subcommand add_show(CLI::App& app);
Subcommand add_launch(CLI::App& app);
Subcommand add_slurm_task(CLI::App& app);
Subcommand add_merge(CLI::App& app);
Subcommand add_report(CLI::App& app);
Subcommand add_rerun_failed(CLI::App& app, const char* argv0);

// tool_commands.cpp: the tools around runs (history, diff, golden files, checkpoints, bisect).
Subcommand add_history(CLI::App& app);
Subcommand add_diff(CLI::App& app);
Subcommand add_golden(CLI::App& app, const char* argv0);
Subcommand add_ckpt(CLI::App& app);
Subcommand add_bisect(CLI::App& app);

// Options that several subcommands take (run_commands.cpp).
// --history and --commit (run, merge, rerun-failed).
void add_history_options(CLI::App& cmd, std::string& history, std::string& commit);
// `--meshtrain PATH` (run, rerun-failed, golden regen): the binary the meshtrain adapter uses.
void add_meshtrain_option(CLI::App& cmd, std::string& path);

}  // namespace meshtest
