// One run's use of the run history (docs/history.md): `meshtest run`, `merge` and `rerun-failed`
// each make one RunHistory, which opens the database once and answers everything the run asks
// of it: the expected durations the plan packs by, the cases that drifted, the recording of the
// finished run, and the strips of recent runs the reports show.
// History is never needed to judge: a missing path answers nothing, and a damaged, locked or
// unwritable database is one warning, after which the run goes on without it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/outcome.h"
#include "history/drift.h"
#include "history/history.h"

namespace meshtest {

class RunHistory {
 public:
  // `path`: the database ("" = none); `commit`: the commit this run is recorded at (commit_of_run);
  // warnings go to `log` (nullptr: none).
  RunHistory(std::string path, std::string commit, std::FILE* log = stderr);
  ~RunHistory();
  RunHistory(const RunHistory&) = delete;
  RunHistory& operator=(const RunHistory&) = delete;

  bool enabled() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  const std::string& commit() const { return commit_; }

  // Each case's median duration over its recent runs (for the plan). `except_commit` leaves out
  // the runs at that commit: the shards of one commit record while others read, so only earlier
  // commits give every shard the same split.
  std::map<std::string, double> durations(const std::string& except_commit = "");

  // The cases of this run, before it is recorded, that passed yet left the band of their recent
  // green runs on other commits (history/drift.h), each said on the log. Judged once per run.
  std::map<std::string, DriftFinding> drift(const std::vector<CaseOutcome>& cases);

  // The runs of `case_id` recorded before this run, newest first, at most `limit`, with their
  // loss curves (what a drift check reads); none when the history cannot be read (said once).
  std::vector<CaseRun> runs_before(const std::string& case_id, int limit);

  // Appends the run `summary` describes (giving it a run_id when it has none), with a warning
  // when its commit is unknown. `repo_dir`: where git tells its branch (the first matrix's folder).
  void record(nlohmann::json& summary, const std::string& repo_dir, const std::string& version);
  // The drift of a run already recorded (`meshtest merge`: the shards' cases, judged once the
  // merged run is in), each said on the log.
  std::map<std::string, DriftFinding> drift_of_recorded(const nlohmann::json& summary);

  // The drift notes and each case's strip of its `runs` recent runs, for the reports.
  void add_notes(nlohmann::json& summary, const std::map<std::string, DriftFinding>& drift, int runs = 12);

 private:
  // The open database; nullptr when there is none, it does not exist yet and `create` is false,
  // or it could not be used (`what` said once why).
  History* open(bool create, const char* what);

  std::string path_, commit_;
  std::FILE* log_;
  std::unique_ptr<History> db_;
  bool unusable_ = false;
  std::string recorded_run_id_;
};

// The commit a run is recorded at: `commit` (--commit) when given, else the HEAD of the git
// checkout holding the first matrix (or the working directory without one), else "unknown".
std::string commit_of_run(const std::string& commit, const std::vector<std::string>& matrices);

// The folder git is asked about for a run's commit and branch: the first matrix's.
std::string repo_dir_of(const std::vector<std::string>& matrices);

}  // namespace meshtest
