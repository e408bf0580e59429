// The drift check against a history given in memory (HistorySource): the rule's edges, which
// the end-to-end test in run_test.cpp (a real history, three commits) does not reach: one green
// run as the whole band, a curve that exactly min_runs references hold, a run inside the band
// and one outside it.
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
