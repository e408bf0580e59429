#include "history/run_history.h"

#include <chrono>
#include <cmath>
#include <filesystem>

#include "core/git.h"
#include "history/record.h"

namespace meshtest {

namespace fs = std::filesystem;

namespace {

void say_drift(std::FILE* log, const std::map<std::string, DriftFinding>& drift) {
  if (!log) return;
  for (const auto& [id, finding] : drift)
    std::fprintf(log, "meshtest: drift: %s passed but left the band of its recent green runs: %s\n", id.c_str(),
                 finding.describe().c_str());
}

}  // namespace

RunHistory::RunHistory(std::string path, std::string commit, std::FILE* log)
    : path_(std::move(path)), commit_(std::move(commit)), log_(log) {}

RunHistory::~RunHistory() = default;

History* RunHistory::open(bool create, const char* what) {
  if (db_) return db_.get();
  if (path_.empty() || unusable_ || (!create && !fs::exists(path_))) return nullptr;
  try {
    db_ = std::make_unique<History>(path_);
  } catch (const std::exception& e) {
    unusable_ = true;
    warn_history_unusable(log_, path_, what, e);
  }
  return db_.get();
}

std::map<std::string, double> RunHistory::durations(const std::string& except_commit) {
  History* db = open(false, "durations not read from the history");
  if (!db) return {};
  try {
    return db->median_durations(5, except_commit);
  } catch (const std::exception& e) {
    warn_history_unusable(log_, path_, "durations not read from the history", e);
    return {};
  }
}

std::map<std::string, DriftFinding> RunHistory::drift(const std::vector<CaseOutcome>& cases) {
  std::map<std::string, DriftFinding> drift;
  History* db = open(false, "drift not judged against the history");
  if (!db) return drift;
  try {
    const DriftRule rule = drift_rule();
    for (const auto& o : cases) {
      // A case that declares drift has its own verdict on it, by its own rule.
      if (!o.spec || o.status() != Status::kPassed || declares_drift(*o.spec)) continue;
      const auto earlier = db->case_runs(o.spec->id, rule.window + 8, true);  // newest first
      if (auto f = find_drift(case_run_of(o, commit_), earlier, rule)) drift[o.spec->id] = *f;
    }
  } catch (const std::exception& e) {
    warn_history_unusable(log_, path_, "drift not judged against the history", e);
  }
  say_drift(log_, drift);
  return drift;
}

std::vector<CaseRun> RunHistory::runs_before(const std::string& case_id, int limit) {
  History* db = open(false, "drift not judged against the history");
  if (!db) return {};
  try {
    return db->case_runs(case_id, limit, true);
  } catch (const std::exception& e) {
    warn_history_unusable(log_, path_, "drift not judged against the history", e);
    return {};
  }
}

void RunHistory::record(nlohmann::json& summary, const std::string& repo_dir, const std::string& version) {
  if (!summary.contains("run_id")) summary["run_id"] = new_run_id(summary.value("hostname", ""));
  History* db = open(true, "run not recorded in the history");
  if (!db) return;
  const RunIdentity id = run_identity(summary, commit_, repo_dir, version);
  if (id.commit == "unknown" && log_)
    std::fprintf(log_,
                 "meshtest: warning: recording this run at commit 'unknown': %s is not in a git checkout, so "
                 "drift and flaky-since cannot place it among other runs; pass --commit SHA\n",
                 repo_dir.c_str());
  try {
    db->record(summary, id);
    recorded_run_id_ = id.run_id;
  } catch (const std::exception& e) {
    warn_history_unusable(log_, path_, "run not recorded in the history", e);
  }
}

std::map<std::string, DriftFinding> RunHistory::drift_of_recorded(const nlohmann::json& summary) {
  std::map<std::string, DriftFinding> drift;
  if (!db_ || recorded_run_id_.empty()) return drift;
  try {
    drift = recorded_drift(*db_, summary, recorded_run_id_);
  } catch (const std::exception& e) {
    warn_history_unusable(log_, path_, "drift not judged against the history", e);
  }
  say_drift(log_, drift);
  return drift;
}

void RunHistory::add_notes(nlohmann::json& summary, const std::map<std::string, DriftFinding>& drift, int runs) {
  if (path_.empty()) return;
  add_drift_notes(summary, drift);
  if (History* db = open(false, "no history strips")) add_history_strips(summary, *db, runs, log_);
}

std::string repo_dir_of(const std::vector<std::string>& matrices) {
  return matrices.empty() ? fs::current_path().string() : fs::absolute(matrices.front()).parent_path().string();
}

std::string commit_of_run(const std::string& commit, const std::vector<std::string>& matrices) {
  if (!commit.empty()) return commit;
  const std::string head = git_line(repo_dir_of(matrices), {"rev-parse", "HEAD"});
  return head.empty() ? "unknown" : head;
}

}  // namespace meshtest
