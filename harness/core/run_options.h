// What a run is asked to do (`meshtest run`'s options) and what it gives back. They live
// in core/ because the plan, the run loop, the launchers and the reports all speak them.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/outcome.h"

namespace meshtest {

// The Slurm launcher's knobs (run/slurm.h, docs/slurm.md).
struct SlurmOptions {
  std::string partition;  // "" = the cluster's default
  std::string account;
  int gpus_per_node = 8;               // ranks per node; a wider case spans nodes
  int time_limit_min = 0;              // per allocation; 0 = from the case's phase timeouts
  int max_pending = 16;                // allocations waiting in the queue at once
  std::vector<std::string> srun_args;  // passed to every srun as they are
  bool gpus = false;                   // request GPUs (the nccl backend)

  // The options as `meshtest run` spells them (--partition ... --srun-arg=...), for a repro line.
  std::vector<std::string> to_args() const;
  // summary.json's "slurm", and back (`rerun-failed`; a missing key keeps its default).
  nlohmann::json to_json() const;
  static SlurmOptions from_json(const nlohmann::json& j);
};

struct RunOptions {
  std::string out_dir = "meshtest-out";
  std::string backend = "gloo";
  int devices = 8;                    // GPUs (nccl) or CPU rank slots (gloo)
  double gpu_memory_bytes = 0;        // the smallest GPU's memory, for simulated worlds (0: unknown, not checked)
  int jobs = 0;                       // cases at once; 0 = as many as fit
  double grace_s = 30;                // SIGTERM to SIGKILL
  std::string durations;              // an earlier summary.json for expected durations (--durations)
  std::string history;                // the run history database (--history, $MESHTEST_HISTORY; docs/history.md)
  std::string commit;                 // the commit a recorded run is at (--commit; default: git in the matrix's folder)
  std::string repro_prefix;           // "meshtest run m.yaml --backend gloo --ngpu 8": + " --id <id>"
  bool progress = false;              // a live line on a TTY
  int retries = 0;                    // reruns of a case that missed its expectation
  std::vector<std::string> matrices;  // for summary.json, so rerun-failed can find them
  std::string launcher = "local";     // local | slurm (slurm.h)
  SlurmOptions slurm;
};

struct RunResult {
  std::vector<CaseOutcome> cases;
  double wall_s = 0;
  int interrupted_by = 0;  // the signal, or 0
  bool all_met() const {   // every case met its expectation and nothing stopped the run
    if (interrupted_by != 0) return false;
    for (const auto& c : cases)
      if (!c.met_expectation()) return false;
    return true;
  }
};

}  // namespace meshtest
