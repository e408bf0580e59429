// Drift: a case whose numbers left the band of its own recent green runs although this run
// passed. Every run within tolerance of its baseline can still creep, commit after commit (a
// changed init, a reordered reduction); the band is what the case itself did lately.
//
// The rule (docs/history.md): the reference runs are the case's last `window` runs that passed,
// on other commits than this run's and recorded before it (at least `min_runs` of them). At every
// step of this run's loss curve that at least `min_runs` references have, the band is their
// median ± max(k x 1.4826 x MAD, rel_floor x |median|): robust to one outlier among the
// references, and never narrower than float rounding. The first step outside it is the finding.
// The band follows the case: once most of its recent green runs hold moved numbers, those are
// its band, so a drift is flagged where it starts (and a later fix shows as a drift back).
//
// The rule's numbers are the `drift` check's parameters (core/check_kinds.cpp gives their
// defaults); a run's drift notes and `history --drift` use the defaults.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/check_kinds.h"
#include "core/outcome.h"
#include "history/history.h"

namespace meshtest {

struct DriftRule {
  int window, min_runs;
  double k, rel_floor;
};
// The rule a `drift` check's parameters give; none: the check's defaults.
DriftRule drift_rule(const CheckParams& params = check_signature(CheckKind::kDrift).defaults());

struct DriftFinding {
  std::string curve;  // "<phase>/loss"
  long long step = 0;
  double value = 0, center = 0, half_width = 0;
  int reference_runs = 0;
  std::string oldest_reference_commit, newest_reference_commit;
  std::string describe()
      const;  // "loss of phase train at step 7: 4.1234 outside 4.1201 ± 1.2e-06 (8 green runs, abc..def)"
};

// Whether `c` declares a `drift` check: its drift is that check's verdict, not a note.
bool declares_drift(const Case& c);

// What the history will hold of a case of this run: its status and its phases' loss curves
// (CaseOutcome::phases[].curve), at `commit`, now.
CaseRun case_run_of(const CaseOutcome& o, const std::string& commit);

// The runs of `earlier` (newest first) whose band `run` is judged against: green, on another
// commit, recorded before it, at most `rule.window`. Fewer than `rule.min_runs`: too few to tell.
std::vector<const CaseRun*> drift_references(const CaseRun& run, const std::vector<CaseRun>& earlier,
                                             const DriftRule& rule);

// Whether `run` (with curves) left the band of `earlier` (the case's runs before it, newest
// first, with curves). nullopt: inside the band, or too few references to tell.
std::optional<DriftFinding> find_drift(const CaseRun& run, const std::vector<CaseRun>& earlier,
                                       const DriftRule& rule = drift_rule());

// A case's first run that drifted, oldest first over its recorded history, and whether its
// newest run still does.
struct CaseDrift {
  std::string case_id;
  CaseRun first;  // the first run outside its band
  DriftFinding finding;
  bool still = false;         // the newest run is outside the band of its own recent green runs
  bool back_in_band = false;  // the newest run is inside the band the first drifted run left (fixed)
};
std::vector<CaseDrift> drifted_cases(const History& history, const DriftRule& rule = drift_rule(), int depth = 1000);

}  // namespace meshtest
