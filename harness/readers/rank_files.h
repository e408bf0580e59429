// The files a phase's ranks leave in its folder, read after the fact: each rank's log, its
// torchelastic error file and its collective file (docs/contracts.md). Everything that
// explains a failed or hung rank reads them through here; nothing here starts a process.
#pragma once

#include <cstddef>
#include <string>

namespace meshtest {

// A rank's files in a phase's log folder: rank<R>.log, error_rank<R>.json, and the collective
// file (MESHTEST_COLLECTIVE_FILE): one line "collectives_entered=N last=OP group=G ranks=K"
// that the trainer keeps current.
std::string rank_log_path(const std::string& dir, int rank);
std::string rank_error_file(const std::string& dir, int rank);
std::string rank_collective_file(const std::string& dir, int rank);

// The last `lines` lines of a file (for failure reports), at most `max_bytes` read.
std::string tail_of_file(const std::string& path, int lines, size_t max_bytes = 1 << 20);

// What a failed rank said: the message of its torchelastic error file, else the last
// line of its log that names an error ("" when neither has one).
std::string rank_error_message(const std::string& dir, int rank);

// Who a hung phase waits for, from its ranks' collective files: the ranks that entered
// fewer collectives than the others, and what the others wait in. `behind` gets the first
// of those ranks. "" when the files do not say (a trainer that writes none, or no rank behind).
std::string ranks_not_arrived(const std::string& dir, int nproc, int* behind);

// True when a failed launch looks like it lost the race for MASTER_PORT, from its ranks' logs.
bool lost_port_race(const std::string& log_dir, int nproc);

}  // namespace meshtest
