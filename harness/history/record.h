// Recording a finished run into the history (`--history PATH` on run, merge and rerun-failed;
// `$MESHTEST_HISTORY`), and the drift notes that come of it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "history/drift.h"
#include "core/outcome.h"
#include "core/plan.h"
#include "core/run_options.h"
#include "history/history.h"

namespace meshtest {

// Says on `log`, once per database `path` and process, that the run history could not be used
// for `what` (later failures of the same database would only repeat it): "meshtest: warning:
// WHAT: ERROR".
void warn_history_unusable(std::FILE* log, const std::string& path, const std::string& what, const std::exception& error);

// What a run was: its summary's run_id, hostname and launcher; the commit and branch from
// `commit` when given (--commit), else from git in `repo_dir` (the first matrix's folder), else
// "unknown"; the time now.
RunIdentity run_identity(const nlohmann::json& summary, const std::string& commit, const std::string& repo_dir,
                         const std::string& version);

// Appends the run to the history at `path` and returns, for every case that passed yet left the
// band of its recent green runs on earlier commits, the finding (case id -> finding). Never
// throws: a damaged, locked or unwritable database is one warning on `log`, and the run goes on.
std::map<std::string, DriftFinding> record_run(const std::string& path, const nlohmann::json& summary,
                                               const RunIdentity& id, std::FILE* log = stderr);

// Adds each finding to its case in `summary` as "drift": {message, step, value, center,
// half_width, reference_runs} (reports show it; it never changes a verdict).
void add_drift_notes(nlohmann::json& summary, const std::map<std::string, DriftFinding>& drift);

// Adds each case's last `runs` runs from the history at `path` to `summary` as "history" (oldest
// first: commit, status, time, final_loss, duration_s), and the commits they span as the run's
// "history": {from_commit, to_commit}, for report.html's strips. Never throws (a warning on `log`).
void add_history_strips(nlohmann::json& summary, const std::string& path, int runs = 12, std::FILE* log = stderr);

// `drift: fail` cases: each that drifted gets a failed `drift` check and is judged again (its
// verdict: check_failed by drift, with the step, value and band). Returns whether any changed.
bool fail_drifted_cases(std::vector<CaseOutcome>& cases, const std::map<std::string, DriftFinding>& drift);

// A fresh run id: host, time and process, hashed: "20261203T014500-3f9a1c2b".
std::string new_run_id(const std::string& host);

// ---- a run's use of the history (meshtest run, merge, rerun-failed) ----------------------

// The commit a run is recorded at: opt.commit (--commit), else the matrices' checkout's HEAD,
// else "unknown".
std::string commit_of_run(const RunOptions& opt, const std::vector<std::string>& matrices);

// Expected seconds per case: `durations_file`'s, then the history's medians. `except_commit`
// leaves out the history's runs at that commit (for --shard: every shard splits alike).
std::map<std::string, double> expected_durations(const RunOptions& opt, const std::string& durations_file,
                                                 const std::string& except_commit = "");

// The cases of a run, before it is recorded, that passed yet left the band of their recent
// green runs on other commits in the history at `history` (read only), each said on stderr.
// `meshtest run` asks this first, so a `drift: fail` case fails (fail_drifted_cases) before the
// summary is built and recorded: the history holds the verdict the reports show. Never throws.
std::map<std::string, DriftFinding> drift_before_recording(const std::string& history,
                                                           const std::vector<CaseOutcome>& cases,
                                                           const std::string& commit, std::FILE* log = stderr);

// Gives `summary` a run_id when it has none, appends the run to the history at `history` (when
// there is one, with a warning when the commit is unknown) and returns the cases that drifted
// (record_run; `meshtest merge`'s notes).
std::map<std::string, DriftFinding> record_in_history(nlohmann::json& summary, const std::string& history,
                                                      const std::string& commit, const std::vector<std::string>& matrices,
                                                      const std::string& version);

// Each finding on stderr: "meshtest: drift: ID passed but left the band ...".
void say_drift(const std::map<std::string, DriftFinding>& drift);

// The drift notes and each case's strip of recent runs, for the reports (nothing without a history).
void add_history_notes(nlohmann::json& summary, const std::map<std::string, DriftFinding>& drift, const std::string& history);

}  // namespace meshtest
