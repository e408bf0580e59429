// Recording a finished run into the history and the notes that come of it: the pieces
// RunHistory (run_history.h) puts together for a run.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "history/drift.h"
#include "core/outcome.h"
#include "history/history.h"

namespace meshtest {

// Says on `log`, once per database `path` and process, that the run history could not be used
// for `what` (later failures of the same database would only repeat it): "meshtest: warning:
// WHAT: ERROR".
void warn_history_unusable(std::FILE* log, const std::string& path, const std::string& what,
                           const std::exception& error);

// What a run was: its summary's run_id, hostname and launcher; the commit and branch from
// `commit` when given (--commit), else from git in `repo_dir` (the first matrix's folder), else
// "unknown"; the time now.
RunIdentity run_identity(const nlohmann::json& summary, const std::string& commit, const std::string& repo_dir,
                         const std::string& version);

// The cases of the run `run_id`, already in `history`, that passed yet left the band of their
// recent green runs before it (case id -> finding). Throws HistoryError.
std::map<std::string, DriftFinding> recorded_drift(const History& history, const nlohmann::json& summary,
                                                   const std::string& run_id);

// Adds each finding to its case in `summary` as "drift": {message, step, value, center,
// half_width, reference_runs} (reports show it; it never changes a verdict).
void add_drift_notes(nlohmann::json& summary, const std::map<std::string, DriftFinding>& drift);

// Adds each case's last `runs` runs in `history` to `summary` as "history" (oldest first: commit,
// status, time, final_loss, duration_s), and the commits they span as the run's "history":
// {from_commit, to_commit}, for report.html's strips. Never throws (a warning on `log`).
void add_history_strips(nlohmann::json& summary, const History& history, int runs = 12, std::FILE* log = stderr);

// A fresh run id: host, time and process, hashed: "20261203T014500-3f9a1c2b".
std::string new_run_id(const std::string& host);

}  // namespace meshtest
