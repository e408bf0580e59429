// `meshtest history`: what the run history says, as tables or one JSON document, and
// `meshtest history merge` (docs/history.md). Reads without the write lock.
#pragma once

#include <string>
#include <vector>

namespace meshtest {

// The questions one `meshtest history` call asks; none: the database's run and case counts.
struct HistoryQuery {
  std::string case_id;  // a case's last runs
  int last = 20;        // runs per case to look at
  bool flaky = false, slowest = false, drift = false;
  bool json = false;  // one JSON document on stdout instead of tables
};

// Answers `q` from database `db`; throws std::runtime_error when there is none or the case has no runs.
int show_history(const std::string& db, const HistoryQuery& q);

// Adds the runs of `from` to `into` (created when missing); INTO among the inputs and an input
// that cannot be read are skipped with one warning each. Exit status 1 when every input was skipped.
int merge_histories(const std::string& into, const std::vector<std::string>& from);

}  // namespace meshtest
