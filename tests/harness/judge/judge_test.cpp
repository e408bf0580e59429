// judge(): a case's check results weighed against its expectation, one test per row of
// docs/checks.md's table, and which check decides where several could (ties, the checks after a
// canary's, the first that could not look) and how a canary's margin reads; then checks and
// judge() together on loaded cases.
#include "harness/judge/checks_fixture.h"

namespace fs = std::filesystem;
using namespace meshtest;

namespace {

CheckResult passed(const std::string& kind) {
  CheckResult r;
  r.kind = kind;
  r.made_by = check_kind_named(kind);
  r.passed = true;
  return r;
}

// A failed check as run_checks leaves it: judged (it disagreed) or not (it could not look).
CheckResult failed(const std::string& kind, const std::string& message, bool judged = true) {
  CheckResult r;
  r.kind = kind;
  r.made_by = check_kind_named(kind);
  r.judged = judged;
  r.message = message;
  r.details = "details of " + kind + "\n";
  r.finding.kind = judged ? VerdictKind::kCheckFailed : VerdictKind::kNotJudged;
  r.finding.check = kind;
  return r;
}

CheckResult crashed() {
  CheckResult r = failed("exit", "phase train: rank 1 failed first with signal 11 (SIGSEGV)");
  r.finding.kind = VerdictKind::kCrashed;
  r.finding.rank = 1;
  return r;
}

Expectation expect(Expectation::Kind kind, const std::string& what = "") {
  Expectation e;
  e.kind = kind;
  if (kind == Expectation::kFail)
    e.check = check_kind_named(what).value();
  else
    e.reason = what;
  return e;
}

// The verdict of a case with expectation `e` whose checks came out as `checks`.
CaseOutcome judged(const Expectation& e, std::vector<CheckResult> checks) {
  static Case spec;  // judge() reads only the expectation
  spec.expect = e;
  CaseOutcome o;
  o.spec = &spec;
  o.checks = std::move(checks);
  judge(o);
  return o;
}

}  // namespace

TEST(Judge, PassIsPassedWhenEveryCheckPassedElseTheFirstFailureDecides) {
  const Expectation pass = expect(Expectation::kPass);
  const CaseOutcome ok = judged(pass, {passed("exit"), passed("loss_finite")});
  EXPECT_EQ(ok.verdict.kind, VerdictKind::kPassed);
  EXPECT_EQ(ok.reason(), "");
  EXPECT_EQ(ok.details, "");
  const CaseOutcome bad = judged(pass, {crashed(), failed("loss_finite", "phase train: loss is nan at step 2")});
  EXPECT_EQ(bad.verdict.kind, VerdictKind::kCrashed);
  EXPECT_EQ(bad.verdict.rank, 1);
  EXPECT_EQ(bad.reason(), "exit: phase train: rank 1 failed first with signal 11 (SIGSEGV)");
  // The body lists every failed check, with its details.
  EXPECT_EQ(bad.details,
            "exit: phase train: rank 1 failed first with signal 11 (SIGSEGV)\ndetails of exit\n"
            "loss_finite: phase train: loss is nan at step 2\ndetails of loss_finite\n");
  const CaseOutcome blind = judged(pass, {passed("exit"), failed("keys_match", "cannot read k.json", false)});
  EXPECT_EQ(blind.verdict.kind, VerdictKind::kNotJudged);
  EXPECT_EQ(blind.status(), Status::kFailed);
}

TEST(Judge, AnXfailMustFailForItsReason) {
  const Expectation xfail = expect(Expectation::kXfail, "issue 7");
  // A number check that disagreed is quoted before `exit`.
  const CaseOutcome x = judged(xfail, {crashed(), failed("keys_match", "state-dict keys differ")});
  EXPECT_EQ(x.verdict.kind, VerdictKind::kXfailed);
  EXPECT_EQ(x.reason(), "issue 7 (keys_match: state-dict keys differ)");
  EXPECT_EQ(x.status(), Status::kXfailed);
  EXPECT_EQ(judged(xfail, {crashed()}).reason(),
            "issue 7 (exit: phase train: rank 1 failed first with signal 11 (SIGSEGV))");
  // A failed message check: it failed, but not the declared way.
  const CaseOutcome other = judged(xfail, {crashed(), failed("error_matches", "rank 1 failed but not with 'OOM'")});
  EXPECT_EQ(other.verdict.kind, VerdictKind::kXfailedDifferently);
  EXPECT_EQ(other.reason(), "xfail (issue 7) failed differently: error_matches: rank 1 failed but not with 'OOM'");
  // A run that ended well and a check that could not look prove nothing.
  const CaseOutcome blind = judged(xfail, {passed("exit"), failed("loss_matches", "cannot read m.jsonl", false)});
  EXPECT_EQ(blind.verdict.kind, VerdictKind::kXfailedDifferently);
  EXPECT_EQ(blind.reason(), "xfail (issue 7) could not be judged: loss_matches: cannot read m.jsonl");
  const CaseOutcome xpass = judged(xfail, {passed("exit"), passed("loss_matches")});
  EXPECT_EQ(xpass.verdict.kind, VerdictKind::kXpassed);
  EXPECT_EQ(xpass.reason(), "XPASS: expected to fail (issue 7) but every check passed");
  EXPECT_EQ(xpass.status(), Status::kFailed);
}

TEST(Judge, ASkipIsSkippedWithItsReason) {
  const CaseOutcome o = judged(expect(Expectation::kSkip, "no GPU"), {passed("exit")});
  EXPECT_EQ(o.verdict.kind, VerdictKind::kSkipped);
  EXPECT_EQ(o.reason(), "no GPU");
}

TEST(Judge, ACanaryIsCaughtOnlyWhenItsCheckJudgedAndFailed) {
  const Expectation canary = expect(Expectation::kFail, "loss_matches");
  CheckResult far = failed("loss_matches", "step 2: loss 5.5 vs 5");
  far.margin = 34;
  const CaseOutcome caught = judged(canary, {passed("exit"), failed("loss_matches", "step 2: near"), far});
  EXPECT_EQ(caught.verdict.kind, VerdictKind::kCanaryCaught);
  EXPECT_EQ(caught.reason(),
            "canary caught by loss_matches (margin 34x): step 2: loss 5.5 vs 5");  // the clearest catch
  EXPECT_EQ(caught.status(), Status::kPassed);
  // A number check's canary must run to the end.
  const CaseOutcome crash = judged(canary, {crashed(), far});
  EXPECT_EQ(crash.verdict.kind, VerdictKind::kCanaryCrashed);
  EXPECT_EQ(crash.reason(),
            "canary for loss_matches crashed instead: phase train: rank 1 failed first with signal 11 (SIGSEGV)");
  const CaseOutcome blind = judged(canary, {passed("exit"), failed("loss_matches", "cannot read m.jsonl", false)});
  EXPECT_EQ(blind.verdict.kind, VerdictKind::kCanaryCrashed);
  EXPECT_EQ(blind.reason(), "canary for loss_matches could not be judged: cannot read m.jsonl");
  const CaseOutcome missed = judged(canary, {passed("exit"), passed("loss_matches")});
  EXPECT_EQ(missed.verdict.kind, VerdictKind::kCanaryNotCaught);
  EXPECT_EQ(missed.reason(), "canary not caught: check loss_matches passed on a known-bad run");
  EXPECT_EQ(missed.verdict.check, "loss_matches");
  // A message check's canary reads a crashed run: that is what it is about.
  const CaseOutcome message = judged(expect(Expectation::kFail, "log_contains"),
                                     {crashed(), failed("log_contains", "no log of phase train contains 'x'")});
  EXPECT_EQ(message.verdict.kind, VerdictKind::kCanaryCaught);
  EXPECT_EQ(message.reason(), "canary caught by log_contains: no log of phase train contains 'x'");
}

// Of a canary's checks that caught it equally clearly (the same margin), the first in the matrix
// decides: the message quotes it, not whichever came last.
TEST(Judge, OfACanarysEquallyClearCatchesTheFirstDecides) {
  CheckResult loss = failed("loss_matches", "step 2: loss 5.5 vs 5");
  CheckResult grad_norm = failed("loss_matches", "step 2: grad_norm 1.1 vs 1");
  loss.margin = grad_norm.margin = 34;
  const CaseOutcome o = judged(expect(Expectation::kFail, "loss_matches"), {passed("exit"), loss, grad_norm});
  EXPECT_EQ(o.verdict.kind, VerdictKind::kCanaryCaught);
  EXPECT_EQ(o.reason(), "canary caught by loss_matches (margin 34x): step 2: loss 5.5 vs 5");
}

// A canary is judged by the check it names alone: a check of another kind after it, passing,
// does not make it "not caught".
TEST(Judge, ACanaryIsJudgedByItsOwnCheckWhateverChecksFollowIt) {
  CheckResult caught = failed("loss_matches", "step 2: loss 5.5 vs 5");
  caught.margin = 34;
  const CaseOutcome o =
      judged(expect(Expectation::kFail, "loss_matches"), {passed("exit"), caught, passed("loss_finite")});
  EXPECT_EQ(o.verdict.kind, VerdictKind::kCanaryCaught);
  EXPECT_EQ(o.reason(), "canary caught by loss_matches (margin 34x): step 2: loss 5.5 vs 5");
}

// An xfail whose checks could not look names the first of them, in the matrix's order, not the last.
TEST(Judge, AnXfailThatCouldNotBeJudgedNamesTheFirstCheckThatCouldNotLook) {
  const CaseOutcome o = judged(expect(Expectation::kXfail, "issue 7"),
                               {passed("exit"), failed("loss_matches", "cannot read m.jsonl", false),
                                failed("keys_match", "cannot read k.json", false)});
  EXPECT_EQ(o.verdict.kind, VerdictKind::kXfailedDifferently);
  EXPECT_EQ(o.reason(), "xfail (issue 7) could not be judged: loss_matches: cannot read m.jsonl");
}

// A canary's margin reads in whole numbers below a million (999999x) and in two digits from a
// million on (1e+06x), so that a huge margin stays short.
TEST(Judge, ACanarysMarginOfAMillionOrMoreReadsInTwoDigits) {
  const Expectation canary = expect(Expectation::kFail, "loss_matches");
  auto reason = [&](double margin) {
    CheckResult r = failed("loss_matches", "step 2: loss 5.5 vs 5");
    r.margin = margin;
    return judged(canary, {passed("exit"), r}).reason();
  };
  EXPECT_EQ(reason(999999), "canary caught by loss_matches (margin 999999x): step 2: loss 5.5 vs 5");
  EXPECT_EQ(reason(1e6), "canary caught by loss_matches (margin 1e+06x): step 2: loss 5.5 vs 5");
}

// ---- checks and judge() together, on loaded cases --------------------------------

TEST_F(Checks, MissingOutputsAndMissingBaselinesAreFailuresThatSaySo) {
  load("  - name: a\n  - name: b\n    checks: [{loss_matches: {baseline: a}}]\n");
  write("b/train/metrics.jsonl", curve({6.0}));
  outcomes_[0].verdict = Verdict::skipped("no GPU");
  EXPECT_EQ(run(1, "loss_matches").message, "baseline s/a did not run (skipped: no GPU)");
  outcomes_[0].verdict = {VerdictKind::kPassed, ""};
  EXPECT_EQ(run(1, "loss_matches").message, "cannot read " + dir_ + "/a/train/metrics.jsonl");
}

TEST_F(Checks, ACanaryIsCaughtOnlyByAJudgedFailureNotByAMissingBaseline) {
  load(
      "  - name: a\n  - name: canary\n    checks: [{loss_matches: {baseline: a}}]\n    expect: {fail: loss_matches}\n");
  write("canary/train/metrics.jsonl", curve({6.0, 5.5}));
  outcomes_[0].verdict = Verdict::skipped("no GPU");
  EXPECT_FALSE(run(1, "loss_matches").judged);
  EXPECT_EQ(outcomes_[1].status(), Status::kFailed);
  EXPECT_EQ(outcomes_[1].reason(),
            "canary for loss_matches could not be judged: baseline s/a did not run (skipped: no GPU)");
  EXPECT_EQ(outcomes_[1].verdict.kind, VerdictKind::kCanaryCrashed);
  outcomes_[0].verdict = {VerdictKind::kPassed, ""};
  write("a/train/metrics.jsonl", curve({6.0, 5.0}));
  EXPECT_TRUE(run(1, "loss_matches").judged);
  EXPECT_EQ(outcomes_[1].status(), Status::kPassed);
  EXPECT_EQ(outcomes_[1].verdict.kind, VerdictKind::kCanaryCaught);
  EXPECT_EQ(outcomes_[1].verdict.step, 2);
  EXPECT_EQ(outcomes_[1].reason().rfind("canary caught by loss_matches (margin 10000x): step 2: loss 5.5", 0), 0u)
      << outcomes_[1].reason();
}

// The margin: the largest |diff| / tolerance compared, for a pass (its headroom) and a catch.
TEST_F(Checks, NumberChecksRecordTheirMarginAndACanaryIsJudgedByItsClearestCatch) {
  load(
      "  - name: a\n"
      "  - name: near\n    checks: [{loss_matches: {baseline: a, rtol: 1.0e-2}}]\n"
      "  - name: canary\n    expect: {fail: loss_matches}\n"
      "    checks: [{loss_matches: {baseline: a, rtol: 1.0e-2}}, {loss_matches: {baseline: a, metric: grad_norm, rtol: 1.0e-3}}]\n");
  write("a/train/metrics.jsonl", curve({6.0, 5.0}));
  write("near/train/metrics.jsonl", curve({6.0, 5.025}));
  const CheckResult near = run(1, "loss_matches");
  EXPECT_TRUE(near.passed);
  ASSERT_TRUE(near.margin);
  EXPECT_NEAR(*near.margin, 0.5, 1e-6);  // 0.025 of a 0.05 tolerance
  // Loss off by 1.2 tolerances, grad norm by 100: the grad-norm comparison is the clearer catch.
  write("canary/train/metrics.jsonl",
        "{\"step\":1,\"loss\":6.0,\"grad_norm\":1.0}\n{\"step\":2,\"loss\":5.06,\"grad_norm\":1.1}\n");
  run(2, "loss_matches");
  EXPECT_EQ(outcomes_[2].verdict.kind, VerdictKind::kCanaryCaught);
  ASSERT_TRUE(outcomes_[2].verdict.margin);
  EXPECT_NEAR(*outcomes_[2].verdict.margin, 100, 1e-6);
  EXPECT_EQ(outcomes_[2].reason().rfind("canary caught by loss_matches (margin 100x): step 2: grad_norm 1.1", 0), 0u)
      << outcomes_[2].reason();
  EXPECT_NEAR(*outcomes_[2].checks[1].margin, 1.2, 1e-6);
}

TEST_F(Checks, AnXfailIsNotMetByACheckThatCouldNotLook) {
  load("  - name: a\n  - name: known\n    checks: [{loss_matches: {baseline: a}}]\n    expect: {xfail: drifts}\n");
  write("known/train/metrics.jsonl", curve({6.0, 5.5}));
  outcomes_[0].verdict = Verdict::skipped("no GPU");
  run(1, "loss_matches");
  EXPECT_EQ(outcomes_[1].status(), Status::kFailed);
  EXPECT_EQ(outcomes_[1].reason(),
            "xfail (drifts) could not be judged: loss_matches: baseline s/a did not run (skipped: no GPU)");
  outcomes_[0].verdict = {VerdictKind::kPassed, ""};
  write("a/train/metrics.jsonl", curve({6.0, 5.0}));
  run(1, "loss_matches");
  EXPECT_EQ(outcomes_[1].status(), Status::kXfailed);
}
