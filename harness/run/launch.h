// Launching one multi-rank command the way torchrun does, without its 10 s of
// Python start-up: one process per rank with torchrun's environment, all ranks in
// one process group, one truncated log file per rank. The first rank to fail, or the
// timeout, stops the group: SIGTERM, a grace period, then SIGKILL. A RankGroup never
// leaves a process behind: its destructor kills and reaps whatever still runs, and
// each rank dies with meshtest (PR_SET_PDEATHSIG) if meshtest itself is killed.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <sys/types.h>

#include "core/outcome.h"
#include "readers/rank_files.h"

namespace meshtest {

struct LaunchSpec {
  std::vector<std::string> argv;  // argv[0]: a path, or a program on PATH
  int nproc = 1;
  std::vector<std::pair<std::string, std::string>> env;  // on top of meshtest's environment
  std::string work_dir;                                  // "" = meshtest's
  std::string log_dir;            // rank<R>.log per rank; "" = ranks write to meshtest's stdout/stderr
  std::vector<std::string> gpus;  // CUDA_VISIBLE_DEVICES (indices, UUIDs or MIG ids); empty = inherited
  int master_port = 0;            // 0 = pick a free one
  double timeout_s = 0;           // 0 = none
  double grace_s = 30;            // SIGTERM to SIGKILL
  std::string case_id;            // the case this phase belongs to (a batch launcher's allocation)
  // argv[0]'s subcommand that starts ranks as forks of one loaded process (a TrainerAdapter's
  // fork_server(), run/fork_server.h); "": each rank is an exec of argv[0].
  std::string fork_server;
};

// Boost.Process's on_exec_setup handler for every program meshtest starts: the forked child
// dies with meshtest (PR_SET_PDEATHSIG, SIGKILL) rather than outlive it.
void die_with_parent();
struct DieWithParent {
  template <class Executor>
  void operator()(Executor&) const {
    die_with_parent();
  }
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

  using Result = LaunchResult;
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

// True when a failed launch looks like it lost the race for MASTER_PORT.
bool lost_port_race(const RankGroup& group);

// A phase that has run `elapsed_s` past its `timeout_s` (0: none): marks `result` timed out and
// gives the reason its ranks are stopped with ("timed out after 30 s"). Every launcher asks this.
std::optional<std::string> past_timeout(double timeout_s, double elapsed_s, LaunchResult& result);

// The wall clock in seconds since the epoch, as LaunchResult's started_at and ended_at hold it.
double wall_clock_s();

// Why meshtest stopped a phase when it received `signal` (SIGINT, SIGTERM): every launcher
// stops with this reason, and the run loop knows a cancelled case by it.
std::string stop_reason(int signal);

// Makes meshtest the reaper of orphaned descendants (a rank's child whose parent
// died is re-parented to meshtest instead of init), so sweep_orphans can kill them.
void become_subreaper();
// Kills and reaps every child of meshtest not in `tracked`. Returns how many.
int sweep_orphans(const std::set<pid_t>& tracked);

}  // namespace meshtest
