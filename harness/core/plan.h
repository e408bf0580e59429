// The plan of a run, built by one function for `run`, `--dry-run` and `--shard` so
// the three never disagree: for each selected case, its folder and exact commands,
// how long it should take, whether it can run on this pool, and the scheduler's task.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/outcome.h"
#include "core/run_options.h"
#include "core/schedule.h"

namespace meshtest {

// Whether the run's cases hold GPUs (nccl), else CPU slots.
inline bool on_gpus(const RunOptions& options) { return options.backend == "nccl"; }
inline const char* const kGpuUnit = "GPUs";

struct Plan {
  // Per case, in selection order: spec, dir, expected_s, repro and phases (name, nproc,
  // dir, argv) filled in; nothing has run.
  std::vector<CaseOutcome> cases;
  std::vector<std::string> skip;  // why case i does not run here: declared, or too wide; "" when it runs
  std::vector<Task> tasks;        // the scheduler's view of case i: a skipped case holds no devices
  std::string unit;               // "GPUs" or "CPU slots"
  bool runs(size_t i) const { return skip[i].empty(); }
};

// {backend} in a case's commands: the run's (`--backend`), or for a simulated world its
// adapter's simulated backend.
std::string backend_of(const Case& c, const std::string& run_backend);

// `history`: expected seconds per case id from an earlier run (load_durations).
Plan plan_run(const std::vector<const Case*>& cases, const RunOptions& options,
              const std::map<std::string, double>& history);

// The cases of shard `index` of `count` (1-based), balanced by expected duration; a case
// and the baselines it is judged against stay in one shard.
std::vector<const Case*> shard_cases(const Plan& plan, int index, int count);

// Expected seconds per case id from an earlier summary.json (empty when absent).
std::map<std::string, double> load_durations(const std::string& summary_path);
double estimate_seconds(const Case& c);
// <out>/<suite>/<case name, characters unusual in paths replaced by _>
std::string case_folder(const std::string& out_dir, const Case& c);

// `--dry-run`: each case's planned start, devices and exact commands, then the planned
// makespan against its lower bound.
std::string plan_text(const Plan& plan, const RunOptions& options);

// Why each case cannot run on a pool of `devices` ("" when it can): wider than the pool
// (torchtitan's rule), or judged against a baseline that is, since a missing baseline
// cannot say whether the case is right.
std::vector<std::string> pool_skips(const std::vector<const Case*>& cases, int devices, const std::string& unit);

}  // namespace meshtest
