// Running a matrix's phases on a Slurm cluster (`meshtest run --launcher slurm`,
// docs/slurm.md). Each case gets one allocation (`salloc --no-shell`), sized for its
// widest phase and held until its last phase ends; each phase is one `srun` step in
// it. Every task of a step is `meshtest slurm-task`, which derives the rank's place
// from SLURM_* and runs the trainer with exactly the environment the local launcher
// gives (launch.h, run_placed_rank), then records the rank's own exit status, since
// srun folds them into one. A case wider than --gpus-per-node spans nodes.
//
// Promises: every job meshtest submits is cancelled by the time the launcher is
// destroyed; an allocation Slurm refuses, or one that waits for a reason that cannot
// clear, ends as a launch error with Slurm's words; a phase's timeout counts from
// its step's start, not from the queue.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/run_options.h"
#include "run/launch.h"

namespace meshtest {

struct Plan;
struct Launcher;

// What Slurm is asked for, for a case or phase of `nproc` ranks.
struct SlurmShape {
  int nodes = 1;
  int tasks_per_node = 1;
};
SlurmShape slurm_shape(int nproc, int gpus_per_node);

// A rank's place from a step's SLURM_* variables (RANK=SLURM_PROCID, node of the first
// host in SLURM_STEP_NODELIST as MASTER_ADDR, ...); MASTER_PORT from MESHTEST_MASTER_PORT.
// Throws std::runtime_error naming the variable that is missing.
RankPlace rank_place_from_slurm();

// `meshtest slurm-task --dir DIR -- COMMAND...`: one task of a step. Runs the rank and
// writes DIR/exit_rank<R>.json; returns the rank's status as a shell would (128+signal).
int run_slurm_task(const std::string& log_dir, const std::vector<std::string>& command);

// A rank's exit record (written by run_slurm_task).
std::string rank_exit_file(const std::string& dir, int rank);

class SlurmLauncher {
 public:
  SlurmLauncher(const Plan& plan, SlurmOptions options);
  ~SlurmLauncher();  // cancels whatever it submitted that still exists
  SlurmLauncher(const SlurmLauncher&) = delete;
  SlurmLauncher& operator=(const SlurmLauncher&) = delete;

  // The RunLoop's view of it; valid while this object lives.
  Launcher launcher();

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace meshtest
