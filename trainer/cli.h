// meshtrain's command line, callable without the program: main() is this one call, and the
// trainer's multi-rank tests start each rank as a fork of a process that loaded LibTorch once,
// calling it where an exec would load LibTorch again (tests/trainer/start_by_fork.cpp). No
// LibTorch here.
#pragma once

// Global, as main() is: a namespace `meshtrain` here would make every test's meshtrain(...)
// helper ambiguous. Parses argv as `meshtrain` would (argv[0] is the program's name) and runs the subcommand.
// Returns the process exit code: 0, 1 for bad input or a failed run (printed to stderr and
// written to $TORCHELASTIC_ERROR_FILE when set), 2 for a command line that does not parse.
int meshtrain_main(int argc, char** argv);
