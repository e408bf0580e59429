// Runs selected cases: packs them onto the device pool (schedule.h), launches each
// phase's ranks (launch.h), checks and judges each finished case (checks.h), and
// writes summary.json. SIGINT/SIGTERM stop every running case the same way a
// failure does, and the reports are still written for what finished.
#pragma once

#include <csignal>

#include <map>
#include <string>
#include <vector>

#include "matrix.h"
#include "outcome.h"

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
};

// Set by the signal handler; the runner polls it.
extern volatile std::sig_atomic_t g_stop_signal;
void install_stop_handlers();

// Expected seconds per case id from an earlier summary.json (empty when absent).
std::map<std::string, double> load_durations(const std::string& summary_path);
double estimate_seconds(const Case& c);
// <out>/<suite>/<case name, characters unusual in paths replaced by _>
std::string case_folder(const std::string& out_dir, const Case& c);

struct RunResult {
  std::vector<CaseOutcome> cases;
  double wall_s = 0;
  int interrupted_by = 0;  // the signal, or 0
  bool all_met() const;
};

// Why each case cannot run on a pool of `devices` ("" when it can): wider than the pool
// (torchtitan's rule), or judged against a baseline that is, since a missing baseline
// cannot say whether the case is right.
std::vector<std::string> pool_skips(const std::vector<const Case*>& cases, int devices, const std::string& unit);

RunResult run_cases(const std::vector<const Case*>& cases, const RunOptions& options);

}  // namespace meshtest
