// Run history in SQLite (docs/history.md): every recorded run's cases, checks, phase durations
// and curves, for the questions one run cannot answer: is this case flaky and since when, did its
// numbers drift across commits while every run passed, which cases got slower. A run is
// recorded from the summary.json it wrote, so `run`, `merge` and `rerun-failed` record alike.
// History is never needed to judge: callers turn a HistoryError into one warning.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace meshtest {

// A damaged, locked or unwritable database: the message names the file and SQLite's reason.
struct HistoryError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Where and what a run was, beyond its summary.json.
struct RunIdentity {
  std::string run_id;  // unique; the summary's "run_id"
  std::string commit;  // git rev-parse HEAD where the matrix lives, or --commit
  std::string branch;
  std::string host, launcher, matrix_hash, version;
  double time = 0;  // seconds since the epoch
};

using Curve = std::vector<std::pair<long long, double>>;  // (step, value), steps ascending

// One case in one run, as `meshtest history CASE` lists it.
struct CaseRun {
  std::string run_id, commit, branch;
  double time = 0;
  std::string status;  // passed, failed, xfailed, ...
  bool met = false;    // it met its expectation
  int attempts = 1;    // > 1: it ran again under --retries
  double duration_s = 0;
  std::optional<double> final_loss;
  std::optional<double> margin;         // the smallest check margin (how close to failing)
  std::map<std::string, Curve> curves;  // "<phase>/<metric>" -> curve (filled on request)
};

// A case that changed its verdict within one commit, or passed only on a retry.
struct FlakyCase {
  std::string case_id;
  int runs = 0, failed = 0, retried = 0;  // in the window; retried: passed after a failed attempt
  double rate = 0;                        // (failed + retried) / runs
  std::string since_commit;               // the first commit it was flaky on
  double since_time = 0;
};

struct SlowCase {
  std::string case_id;
  int runs = 0;
  double median_s = 0, last_s = 0, first_s = 0;  // first_s: the oldest run in the window
};

// The median of `values` (the mean of the middle two for an even count; 0 for none).
double median(std::vector<double> values);

class History {
 public:
  // Opens the database at `path`, creating it or migrating its schema forward (WAL mode, waits
  // up to 30 s for a writer). Throws HistoryError.
  explicit History(const std::string& path);
  ~History();
  History(const History&) = delete;
  History& operator=(const History&) = delete;

  // Appends the run a summary.json describes, in one transaction. A run already recorded (same
  // run_id) is left as it is: returns false.
  bool record(const nlohmann::json& summary, const RunIdentity& id);
  // Adds every run of the database at `other` that this one lacks; returns how many.
  int merge_from(const std::string& other);

  // `case_id`'s last `limit` runs, newest first; with `curves`, their curves too.
  std::vector<CaseRun> case_runs(const std::string& case_id, int limit, bool curves = false) const;
  // Every case id recorded, sorted.
  std::vector<std::string> case_ids() const;
  // Cases flaky within each one's last `window` runs, highest rate first.
  std::vector<FlakyCase> flaky(int window) const;
  // Cases by the median duration of their last `window` runs, slowest first.
  std::vector<SlowCase> slowest(int window, int limit) const;
  // Each case's median duration over its last `window` runs that ran (for the scheduler).
  // Runs at `except_commit` are left out: the shards of one commit record while the others read,
  // so only earlier commits give every shard the same durations, hence the same split.
  std::map<std::string, double> median_durations(int window, const std::string& except_commit = "") const;
  int run_count() const;
  const std::string& path() const { return path_; }

  static constexpr int kSchemaVersion = 1;

 private:
  struct Db;
  std::unique_ptr<Db> db_;
  std::string path_;
};

}  // namespace meshtest
