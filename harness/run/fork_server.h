// Ranks started as forks of a trainer that has loaded its libraries once (meshtrain's
// `forkserver`, trainer/fork_server.h; docs/architecture.md#the-fork-server) instead of one exec
// each. One server per program, subcommand and environment, started by the first rank that
// needs it, adopted with its ranks by this process (a subreaper), and kept until
// stop_fork_servers(). A program whose server cannot start or dies is exec'd again, with a note.
#pragma once

#include <sys/types.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace meshtest {

// The variables a launcher sets per rank or per phase. Nothing reads them before main(), so a
// server started without them serves every rank whose environment differs only in them.
const std::set<std::string>& per_rank_variables();

// Starts one rank through `program`'s fork server (`program SUBCOMMAND --fd 3`): the rank gets
// argv, the environment `env` ("KEY=VALUE" each, the whole of it), work_dir, the descriptors
// stdio[0..2] and process group `process_group` (0: it leads a new one), and is this process's
// child. nullopt when this program has no working server for `env` (the caller execs instead),
// one that did not say it was ready within `hello_seconds` of its start included.
std::optional<pid_t> fork_rank(const std::string& program, const std::string& subcommand,
                               const std::vector<std::string>& argv, const std::vector<std::string>& env,
                               const std::string& work_dir, pid_t process_group, const int stdio[3],
                               double hello_seconds = 120);

// The servers running now (sweep_orphans leaves them alone).
std::set<pid_t> fork_server_pids();
// Closes every server's socket and waits for it to exit.
void stop_fork_servers();

}  // namespace meshtest
