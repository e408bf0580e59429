// Runs a plan (plan.h): packs its cases onto the device pool (schedule.h), launches
// each phase's ranks (launch.h), checks and judges each finished case (checks.h);
// the states a case goes through are in run_loop.h. SIGINT/SIGTERM stop every
// running case the same way a failure does, and every case still gets a verdict.
#pragma once

#include <csignal>

#include <string>
#include <vector>

#include "core/matrix.h"
#include "core/outcome.h"
#include "run/slurm.h"

namespace meshtest {

struct RunOptions {
  std::string out_dir = "meshtest-out";
  std::string backend = "gloo";
  int devices = 8;      // GPUs (nccl) or CPU rank slots (gloo)
  int jobs = 0;         // cases at once; 0 = as many as fit
  double grace_s = 30;  // SIGTERM to SIGKILL
  std::string meshtrain;
  std::string history;  // an earlier summary.json for expected durations
  std::string repro_prefix;  // "meshtest run m.yaml --backend gloo --ngpu 8": + " --id <id>"
  bool progress = false;     // a live line on a TTY
  int retries = 0;           // reruns of a case that missed its expectation
  std::vector<std::string> matrices;  // for summary.json, so rerun-failed can find them
  std::string launcher = "local";     // local | slurm (slurm.h)
  SlurmOptions slurm;
};

// Set by the signal handler; the runner polls it.
extern volatile std::sig_atomic_t g_stop_signal;
void install_stop_handlers();

struct RunResult {
  std::vector<CaseOutcome> cases;
  double wall_s = 0;
  int interrupted_by = 0;  // the signal, or 0
  bool all_met() const;
};

struct Plan;
RunResult run_cases(const Plan& plan, const RunOptions& options);

}  // namespace meshtest
