// A run's life, from the matrix to the reports: `meshtest run` selects and plans the cases,
// runs them (run/), judges drift against the run history once, builds the one summary,
// records it (history/) and renders the reports from it (report/). `rerun-failed` is a run of
// an earlier run's misses with its options; `merge` is shards' runs as one. These sit above
// run/, history/ and report/, which do not know each other.
#pragma once

#include <string>
#include <vector>

#include "core/run_options.h"
#include "core/selection.h"

namespace meshtest {

// What `meshtest run` was asked: the cases and every option that changes the run.
struct RunRequest {
  Selection selection;
  RunOptions options;
  int ngpu = -1;  // the pool; -1: this machine's (default_devices), or 1024 under Slurm
  bool dry_run = false;
  std::vector<std::string> skip_tags;  // TAG[=REASON]
  std::string meshtrain;               // --meshtrain as given ("": next to meshtest)
};

// The command that runs the request again, less the case selection (a case's repro line adds
// its --id): the program, the matrices and every option that changes what runs or its verdict.
std::string repro_prefix(const std::string& program, const RunRequest& request);

// `meshtest run`: 0 when every case met its expectation, 1 when one did not, 128 + the signal
// that stopped the run, or the reports' failure.
int run_matrix(RunRequest request, const std::string& program);

// `meshtest rerun-failed`: the cases of the run in `from` that missed their expectation, with
// its matrices, backend, pool, launcher and Slurm options; `request` gives the rest (--grace,
// --retries, --history ...). 0 when there is nothing to rerun.
int rerun_failed(const std::string& from, const std::string& out, RunRequest request, const std::string& program);

// `meshtest merge`: the runs in `inputs` (a sharded run's shards) as one summary and its
// reports in `out`, recorded in `history` only when given (the shards recorded their own runs).
int merge_runs(const std::string& out, const std::vector<std::string>& inputs, const std::string& history,
               const std::string& commit);

// $MESHTEST_HISTORY, or "".
std::string history_from_environment();

}  // namespace meshtest
