// The drift check against a history given in memory (HistorySource): the rule's edges, which
// the end-to-end test in run_test.cpp (a real history, three commits) does not reach: one green
// run as the whole band, a curve that exactly min_runs references hold, a run inside the band
// and one outside it; phases after one that did not run, a NaN loss left out, the run's curves
// named when there is nothing to judge by, and the margin below the band as above.
#include <utility>

#include "harness/judge/checks_fixture.h"

using namespace meshtest;

namespace {

// A green run of case s/a at `commit`, recorded before this one, with one loss curve.
CaseRun green_run(const std::string& commit, const std::string& curve_name, std::vector<double> losses) {
  CaseRun r;
  r.commit = commit, r.status = "passed", r.met = true, r.time = 1.0;
  Curve& c = r.curves[curve_name];
  for (size_t i = 0; i < losses.size(); ++i) c.emplace_back(static_cast<long long>(i + 1), losses[i]);
  return r;
}

}  // namespace

class DriftCheck : public Checks {
 protected:
  void history(std::vector<CaseRun> earlier) {
    history_.commit = "now";
    history_.runs = [earlier = std::move(earlier)](const std::string& id, int) {
      return id == "s/a" ? earlier : std::vector<CaseRun>{};
    };
  }
};

// min_runs: 1 is a valid rule (one green run is the band), and the verdict follows the band:
// inside passes, outside fails with the step and the band.
TEST_F(DriftCheck, OneGreenRunIsABandWhenMinRunsIsOne) {
  load("  - name: a\n    checks: [{drift: {min_runs: 1, window: 1}}]\n");
  history({green_run("c1", "train/loss", {6.0, 5.0})});
  write("a/train/metrics.jsonl", curve({6.0, 5.0}));
  CheckResult r = run(0, "drift");
  EXPECT_TRUE(r.judged) << r.message;
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_EQ(r.message, "inside the band of its last 1 green runs");

  write("a/train/metrics.jsonl", curve({6.0, 5.5}));
  r = run(0, "drift");
  EXPECT_TRUE(r.judged) << r.message;
  EXPECT_FALSE(r.passed) << "a loss 10% off its only green run stayed in the band";
  EXPECT_NE(r.message.find("drifted: loss of phase train at step 2: 5.5 outside 5"), std::string::npos) << r.message;
}

// A curve held by exactly min_runs of the references has a band; a run whose curve only fewer
// hold has nothing to be judged by, and says so rather than passing.
TEST_F(DriftCheck, ACurveThatExactlyMinRunsReferencesHoldIsJudged) {
  load("  - name: a\n    checks: [{drift: {min_runs: 2, window: 3}}]\n");
  history({green_run("c3", "train/loss", {6.0, 5.0}), green_run("c2", "renamed/loss", {6.0, 5.0}),
           green_run("c1", "train/loss", {6.0, 5.0})});
  write("a/train/metrics.jsonl", curve({6.0, 4.0}));
  CheckResult r = run(0, "drift");
  EXPECT_TRUE(r.judged) << r.message;
  EXPECT_FALSE(r.passed) << r.message;
  EXPECT_NE(r.message.find("drifted: loss of phase train at step 2: 4 outside 5"), std::string::npos) << r.message;

  history({green_run("c3", "train/loss", {6.0, 5.0}), green_run("c2", "renamed/loss", {6.0, 5.0}),
           green_run("c1", "renamed/loss", {6.0, 5.0})});
  r = run(0, "drift");
  EXPECT_FALSE(r.passed) << r.message;
  EXPECT_NE(r.message.find("nothing to judge drift by"), std::string::npos) << r.message;
}

// Runs at this run's own commit, red runs and runs beyond the window are no references.
TEST_F(DriftCheck, OnlyGreenRunsAtOtherCommitsWithinTheWindowCount) {
  load("  - name: a\n    checks: [{drift: {min_runs: 2, window: 2}}]\n");
  CaseRun red = green_run("c2", "train/loss", {6.0, 5.0});
  red.status = "failed", red.met = false;
  history({green_run("now", "train/loss", {6.0, 5.0}), red, green_run("c1", "train/loss", {6.0, 5.0})});
  write("a/train/metrics.jsonl", curve({6.0, 5.0}));
  const CheckResult r = run(0, "drift");
  EXPECT_FALSE(r.judged) << r.message;
  EXPECT_EQ(r.message, "not judged: 1 green run of this case at other commits in the history, 2 needed");
}

// drift judges the phases that ran: a first phase that did not run is passed over, and the loss of
// the phase after it is judged against its green runs.
TEST_F(DriftCheck, DriftJudgesThePhasesAfterOneThatDidNotRun) {
  load(
      "  - name: a\n"
      "    phases: [{name: warmup}, {name: train}]\n"
      "    checks: [{drift: {min_runs: 1, window: 1}}]\n");
  outcomes_[0].phases[0].ran = false;
  write("a/train/metrics.jsonl", curve({6.0, 5.0}));
  history({green_run("c1", "train/loss", {6.0, 5.0})});
  const CheckResult r = run(0, "drift");
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_EQ(r.message, "inside the band of its last 1 green runs");
}

// drift judges the finite losses only: a NaN step (loss_finite's to report) is left out of the
// run's curve, and the rest of it is inside the band.
TEST_F(DriftCheck, DriftLeavesANanLossOutAndJudgesTheRest) {
  load("  - name: a\n    checks: [{drift: {min_runs: 1, window: 1}}]\n");
  write("a/train/metrics.jsonl", curve({6.0, 5.0}) + "{\"step\":3,\"loss\":null}\n");
  history({green_run("c1", "train/loss", {6.0, 5.0, 4.0})});
  const CheckResult r = run(0, "drift");
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_EQ(r.message, "inside the band of its last 1 green runs");
}

// When no loss curve of the run is in enough green runs, the failure names the run's curves
// ("train/loss", as the history keys them: a renamed phase shows), or "none" when every loss was NaN.
TEST_F(DriftCheck, DriftWithNothingToJudgeByNamesTheRunsLossCurves) {
  load("  - name: a\n    checks: [{drift: {min_runs: 1, window: 1}}]\n");
  history({green_run("c1", "pretrain/loss", {6.0, 5.0})});
  write("a/train/metrics.jsonl", curve({6.0, 5.0}));
  CheckResult r = run(0, "drift");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message,
            "no loss curve of this run (train/loss) is in 1 of its 1 green runs at other commits: nothing to judge "
            "drift by");
  write("a/train/metrics.jsonl", "{\"step\":1,\"loss\":null}\n{\"step\":2,\"loss\":null}\n");
  r = run(0, "drift");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message,
            "no loss curve of this run (none) is in 1 of its 1 green runs at other commits: nothing to judge drift by");
}

// drift's margin is how far the loss left the band's centre over the band's half width, below the
// centre as above it: 2 for a loss of 2.5 or 7.5 against 5 ± 1.25, never 0 for a loss that fell.
TEST_F(DriftCheck, DriftsMarginIsTheDistanceFromTheCentreOverTheHalfWidthOnEitherSide) {
  load("  - name: a\n    checks: [{drift: {min_runs: 1, window: 1, rel_floor: 0.25}}]\n");
  history({green_run("c1", "train/loss", {6.0, 5.0})});
  for (const double loss : {2.5, 7.5}) {
    write("a/train/metrics.jsonl", curve({6.0, loss}));
    const CheckResult r = run(0, "drift");
    EXPECT_FALSE(r.passed) << loss;
    EXPECT_EQ(r.margin, 2.0) << r.message;
  }
}
