// Launching one multi-rank command the way torchrun does, without its 10 s of
// Python start-up: one process per rank with torchrun's environment, all ranks in
// one process group, one truncated log file per rank. The first rank to fail, or the
// timeout, stops the group: SIGTERM, a grace period, then SIGKILL. A RankGroup never
// leaves a process behind: its destructor kills and reaps whatever still runs, and
// each rank dies with meshtest (PR_SET_PDEATHSIG) if meshtest itself is killed.
#pragma once

#include <chrono>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <sys/types.h>

namespace meshtest {

// How a rank ended: an exit code, or the signal that killed it.
struct RankExit {
  int rank = -1;
  int exit_code = 0;
  int signal = 0;
  bool ok() const { return exit_code == 0 && signal == 0; }
  std::string describe() const;  // "exit code 3", "signal 11 (SIGSEGV)"
};

struct LaunchSpec {
  std::vector<std::string> argv;  // argv[0]: a path, or a program on PATH
  int nproc = 1;
  std::vector<std::pair<std::string, std::string>> env;  // on top of meshtest's environment
  std::string work_dir;  // "" = meshtest's
  std::string log_dir;   // rank<R>.log per rank; "" = ranks write to meshtest's stdout/stderr
  std::vector<std::string> gpus;  // CUDA_VISIBLE_DEVICES (indices, UUIDs or MIG ids); empty = inherited
  int master_port = 0;    // 0 = pick a free one
  double timeout_s = 0;   // 0 = none
  double grace_s = 30;    // SIGTERM to SIGKILL
  std::string case_id;    // the case this phase belongs to (a batch launcher's allocation)
};

// Where one rank sits in a launch, in torchrun's terms.
struct RankPlace {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_world = 1;
  int group_rank = 0;   // the node's index
  int group_world = 1;  // nodes
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
};

// Runs one rank in the foreground with the same environment a RankGroup gives its ranks
// (torchrun's variables for `place`, the rank's files under log_dir) and its output in
// rank<R>.log there. SIGTERM/SIGINT to the caller are passed to the rank (one the caller
// held blocked arrives when this starts, and the rank is then not started). This is how a
// batch launcher (slurm.h) starts ranks that a trainer cannot tell from local ones.
// `stopped` says whether a stop signal arrived before the rank ended.
RankExit run_placed_rank(const RankPlace& place, const std::string& log_dir, const std::vector<std::string>& argv,
                         bool* stopped);

class LaunchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RankGroup {
 public:
  // Spawns every rank. Throws LaunchError when the program cannot be started.
  explicit RankGroup(LaunchSpec spec);
  ~RankGroup();
  RankGroup(const RankGroup&) = delete;
  RankGroup& operator=(const RankGroup&) = delete;

  // Reaps ranks that exited, stops the group on the first failure or the timeout,
  // escalates to SIGKILL after the grace period. Returns true once every rank is reaped.
  bool poll();
  // Stops the group (SIGTERM now, SIGKILL after the grace period), e.g. on Ctrl-C.
  void stop(const std::string& reason);

  struct Result {
    std::vector<RankExit> exits;  // by rank
    RankExit first_failure;       // rank -1 when every rank exited 0
    bool timed_out = false;
    std::string stopped_because;  // "" unless stop() or a failure/timeout ended the group
    bool killed = false;          // the grace period ran out and SIGKILL was sent
    double duration_s = 0;
    bool ok() const { return first_failure.rank < 0 && !timed_out && stopped_because.empty(); }
  };
  const Result& result() const { return result_; }
  const LaunchSpec& spec() const { return spec_; }
  std::vector<pid_t> pids() const;
  int master_port() const { return spec_.master_port; }
  std::string log_path(int rank) const;
  std::string error_file(int rank) const;  // TORCHELASTIC_ERROR_FILE of a rank ("" without log_dir)

 private:
  struct Impl;
  LaunchSpec spec_;
  std::unique_ptr<Impl> impl_;
  Result result_;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point kill_at_;
  bool stopping_ = false;
  bool done_ = false;
};

// A rank's files in a phase's log folder: rank<R>.log and error_rank<R>.json.
std::string rank_log_path(const std::string& dir, int rank);
std::string rank_error_file(const std::string& dir, int rank);

// What a failed rank said: the message of its torchelastic error file, else the last
// line of its log that names an error ("" when neither has one).
std::string rank_error_message(const std::string& dir, int rank);

// A rank's collective file (MESHTEST_COLLECTIVE_FILE, docs/contracts.md): one line
// "collectives_entered=N last=OP group=G ranks=K" that the trainer keeps current.
std::string rank_collective_file(const std::string& dir, int rank);

// Who a hung phase waits for, from its ranks' collective files: the ranks that entered
// fewer collectives than the others, and what the others wait in. `behind` gets the first
// of those ranks. "" when the files do not say (a trainer that writes none, or no rank behind).
std::string ranks_not_arrived(const std::string& dir, int nproc, int* behind);

// True when a failed launch looks like it lost the race for MASTER_PORT.
bool lost_port_race(const RankGroup& group);
bool lost_port_race(const std::string& log_dir, int nproc);  // from its ranks' logs

// Makes meshtest the reaper of orphaned descendants (a rank's child whose parent
// died is re-parented to meshtest instead of init), so sweep_orphans can kill them.
void become_subreaper();
// Kills and reaps every child of meshtest not in `tracked`. Returns how many.
int sweep_orphans(const std::set<pid_t>& tracked);

// The last `lines` lines of a file (for failure reports), at most `max_bytes` read.
std::string tail_of_file(const std::string& path, int lines, size_t max_bytes = 1 << 20);

}  // namespace meshtest
