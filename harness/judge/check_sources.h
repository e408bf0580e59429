// What a check reads beyond its own case's files: the other cases of the run, and the run
// history. The run loop gives them to run_checks (checks.h); each check room reads them.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/outcome.h"
#include "history/history.h"

namespace meshtest {

// The run history as a check sees it (CheckInput::kHistory): a case's runs recorded before
// this run, newest first, at most `limit`, with their loss curves; and the commit this run is
// recorded at. No `runs`: the run has no history (neither --history nor MESHTEST_HISTORY).
struct HistorySource {
  std::function<std::vector<CaseRun>(const std::string& case_id, int limit)> runs;
  std::string commit;
};

// Where a check looks beyond its own case's files: another case of this run (a baseline),
// and the run history (drift).
struct CheckSources {
  FindCase find_case;
  HistorySource history;
};

}  // namespace meshtest
