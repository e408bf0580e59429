// loss_matches with Megatron-LM's rules (`rule:`, judge/curve_rules.h), band goldens, the
// num_zeros metric and {hardware} golden paths: each passing where Megatron passes, and failing,
// with the message a person reads, on every way a rule could go soft (a missing step, a nan, one
// miss over the allowance, the golden's own nan, the tolerance of another metric, a negative
// golden), and a band's edges (a missing step measured from its low end, a band open at one end),
// and the reference curves a rule draws (a band's upper end only for a band golden).
#include <cmath>
#include <cstdlib>
#include <map>

#include "core/matrix.h"
#include "judge/curve_rules.h"
#include "harness/judge/checks_fixture.h"

using namespace meshtest;

namespace {

// Megatron's sampling of a run: step 1, then every `every`-th step up to `last`.
std::map<long long, double> megatron_sampled(double value, int last = 100, int every = 5) {
  std::map<long long, double> out{{1, value}};
  for (int s = every; s <= last; s += every) out[s] = value;
  return out;
}

std::string rule_golden(const std::map<long long, double>& values) {
  std::string out = "# a golden, as golden import megatron writes one\n";
  for (const auto& [step, v] : values)
    out += std::to_string(step) + " " + (std::isnan(v) ? "nan" : std::to_string(v)) + "\n";
  return out;
}

// A metrics.jsonl of steps 1..last, every value `value` but those in `at`; a NaN is written null,
// as JSON encoders do, and a step in `skip` is not written at all.
std::string rule_logged(double value, const std::map<long long, double>& at = {}, int last = 100,
                        const std::string& field = "loss", const std::vector<long long>& skip = {}) {
  std::string out;
  for (long long s = 1; s <= last; ++s) {
    if (std::find(skip.begin(), skip.end(), s) != skip.end()) continue;
    const double v = at.count(s) ? at.at(s) : value;
    const std::string text = std::isnan(v) ? "null" : std::to_string(v);
    out += "{\"step\":" + std::to_string(s) + ",\"loss\":" + (field == "loss" ? text : "5.0") + ",\"grad_norm\":1.0" +
           (field == "loss" ? "" : ",\"" + field + "\":" + text) + "}\n";
  }
  return out;
}

const char* kApproximateCase =
    "  - name: a\n    checks: [{loss_matches: {golden: g.txt, rule: megatron-approximate}}]\n";
const char* kDeterministicCase =
    "  - name: a\n    checks: [{loss_matches: {golden: g.txt, rule: megatron-deterministic}}]\n";

std::string rule_load_errors(const std::string& cases) {
  try {
    load_suite_text("suite: s\ndefaults: {command: [fake]}\ncases:\n" + cases, "m.yaml");
  } catch (const MatrixError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_F(Checks, MegatronApproximateAllowsItsFewMissesWithinFivePercentAndNoMore) {
  load(kApproximateCase);
  write("g.txt", rule_golden(megatron_sampled(10.0)));  // 21 steps: min(max(21 // 100, 1), 50) = 1 may miss
  write("a/train/metrics.jsonl", rule_logged(10.4));
  CheckResult r = run(0, "loss_matches");
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_EQ(r.message,
            "megatron-approximate (rtol 0.05, atol 0): 0 of 21 golden steps missed, at most 1 may (Megatron's "
            "min(max(21 // 100, 1), 50))");
  EXPECT_NEAR(r.margin.value_or(-1), 0.8, 1e-9);  // 0.4 of a 0.5 tolerance
  EXPECT_EQ(r.band, std::make_pair(0.05, 0.0));

  write("a/train/metrics.jsonl", rule_logged(10.4, {{10, 10.6}}));  // one miss: allowed
  r = run(0, "loss_matches");
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_NE(r.message.find("1 of 21 golden steps missed"), std::string::npos) << r.message;
  EXPECT_NEAR(r.margin.value_or(-1), 0.8, 1e-9);  // the step that would fail it: the second worst

  write("a/train/metrics.jsonl", rule_logged(10.4, {{10, 10.6}, {20, 10.7}}));  // two: one over
  r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message,
            "megatron-approximate (rtol 0.05, atol 0): 2 of 21 golden steps missed, at most 1 may "
            "(Megatron's min(max(21 // 100, 1), 50)); first miss: step 10: loss 10.6 in phase train vs 10 "
            "in golden " +
                dir_ + "/g.txt: |diff| 6.00e-01 > atol 0 + rtol 0.05 x |10| = 5.00e-01");
  EXPECT_NEAR(r.margin.value_or(-1), 1.2, 1e-9);
  EXPECT_NE(r.details.find("<-"), std::string::npos) << r.details;
  EXPECT_EQ(outcomes_[0].verdict.step, 10);
  EXPECT_DOUBLE_EQ(outcomes_[0].verdict.tolerance.value_or(0), 0.5);

  // Below the golden as above it.
  write("a/train/metrics.jsonl", rule_logged(10.0, {{10, 9.4}, {20, 9.3}}));
  EXPECT_FALSE(run(0, "loss_matches").passed);
  // Steps off Megatron's sampling are not judged, as Megatron judges only the golden's steps.
  write("a/train/metrics.jsonl", rule_logged(10.0, {{2, 50.0}, {3, 50.0}}));
  EXPECT_TRUE(run(0, "loss_matches").passed);
}

// Each way the rule could let a bad run through, one over the allowance each time.
TEST_F(Checks, MegatronApproximateCountsAMissingStepANanAndAGoldenNanAsMisses) {
  load(kApproximateCase);
  write("g.txt", rule_golden(megatron_sampled(10.0)));
  write("a/train/metrics.jsonl", rule_logged(10.0, {{20, 11.0}}, 100, "loss", {10}));  // step 10 never logged
  CheckResult r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed) << "a missing step was not counted";
  EXPECT_NE(r.message.find("2 of 21 golden steps missed, at most 1 may"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("first miss: step 10: phase train logged no loss there (a step not logged counts as nan, "
                           "which meets only a golden nan) vs 10 in golden"),
            std::string::npos)
      << r.message;
  EXPECT_NEAR(r.margin.value_or(-1), 2.0, 1e-9);  // step 20's 1.0 over 0.5: the second worst, after the missing step

  write("a/train/metrics.jsonl", rule_logged(10.0, {{10, NAN}, {20, 11.0}}));
  r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed) << "a nan was not counted";
  EXPECT_NE(r.message.find("first miss: step 10: loss nan in phase train vs 10 in golden " + dir_ +
                           "/g.txt: nan meets no value"),
            std::string::npos)
      << r.message;

  // A golden nan: the golden run logged nothing there. A step not logged meets it (Megatron:
  // "nan" is inf on both sides); a value does not.
  std::map<long long, double> golden = megatron_sampled(10.0);
  golden[1] = golden[5] = NAN;
  write("g.txt", rule_golden(golden));
  write("a/train/metrics.jsonl", rule_logged(10.0, {}, 100, "loss", {1, 2, 3, 4, 5}));
  EXPECT_TRUE(run(0, "loss_matches").passed);
  write("a/train/metrics.jsonl", rule_logged(10.0));
  r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed) << "values where the golden logged none passed";
  EXPECT_NE(r.message.find("first miss: step 1: loss 10 in phase train vs nan in golden " + dir_ +
                           "/g.txt: a golden nan marks a step that logged no value (Megatron reads it as inf)"),
            std::string::npos)
      << r.message;
}

TEST_F(Checks, MegatronsAllowanceGrowsWithTheStepsAndIsNoneForOneStep) {
  load(kApproximateCase);
  write("g.txt", rule_golden(megatron_sampled(10.0, 1000)));  // 201 steps: 2 may miss
  write("a/train/metrics.jsonl", rule_logged(10.0, {{10, 11.0}, {20, 11.0}}, 1000));
  EXPECT_TRUE(run(0, "loss_matches").passed);
  write("a/train/metrics.jsonl", rule_logged(10.0, {{10, 11.0}, {20, 11.0}, {30, 11.0}}, 1000));
  CheckResult r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("3 of 201 golden steps missed, at most 2 may (Megatron's min(max(201 // 100, 1), 50))"),
            std::string::npos)
      << r.message;

  write("g.txt", rule_golden({{5, 10.0}}));
  write("a/train/metrics.jsonl", rule_logged(10.6, {}, 5));
  r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed) << "the one step of a one-step golden missed and passed";
  EXPECT_NE(r.message.find("1 of 1 golden steps missed, and none may (the golden has one step)"), std::string::npos)
      << r.message;

  // Three steps: Megatron's min(max(3 // 100, 1), 50) is 1, but its mean(is_close) >= 1 - 1/3
  // in doubles (0.6666666666666666 >= 0.6666666666666667) fails one miss; so does meshtest.
  EXPECT_EQ(megatron_allowance(3).allowed, 1);
  EXPECT_EQ(megatron_allowance(3).effective, 0);
  EXPECT_EQ(megatron_allowance(21).effective, 1);
  EXPECT_EQ(megatron_allowance(10000).effective, 50);
  write("g.txt", rule_golden({{1, 10.0}, {5, 10.0}, {10, 10.0}}));
  write("a/train/metrics.jsonl", rule_logged(10.0, {{5, 11.0}}, 10));
  r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("1 of 3 golden steps missed, at most 0 may (Megatron's min(max(3 // 100, 1), 50) is 1, but "
                           "its test mean(is_close) >= 1 - 1/3 in doubles lets through 0)"),
            std::string::npos)
      << r.message;
}

TEST_F(Checks, MegatronApproximateJudgesNumZerosWithTwentyPercentAndLossesWithFive) {
  load("  - name: a\n    checks: [{loss_matches: {golden: z.txt, metric: num_zeros, rule: megatron-approximate}}]\n");
  write("z.txt", rule_golden(megatron_sampled(1000.0)));
  write("a/train/metrics.jsonl", rule_logged(1150.0, {}, 100, "num_zeros"));
  CheckResult r = run(0, "loss_matches");
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_EQ(r.message.rfind("megatron-approximate (rtol 0.2, atol 0): 0 of 21", 0), 0u) << r.message;
  write("a/train/metrics.jsonl", rule_logged(1150.0, {{10, 1250.0}, {20, 1250.0}}, 100, "num_zeros"));
  EXPECT_FALSE(run(0, "loss_matches").passed);
  // The loss keeps its 5%: 15% off at two steps fails.
  load(kApproximateCase);
  write("g.txt", rule_golden(megatron_sampled(10.0)));
  write("a/train/metrics.jsonl", rule_logged(10.0, {{10, 11.5}, {20, 11.5}}));
  EXPECT_FALSE(run(0, "loss_matches").passed);
}

// A golden of zeros (Megatron's num-zeros often is) has no tolerance: a logged zero meets it with
// margin 0, as far from failing as a match can be, and anything else fails.
TEST_F(Checks, MegatronApproximateMeetsAGoldenOfZerosOnlyWithZerosAndMarginZero) {
  load("  - name: a\n    checks: [{loss_matches: {golden: z.txt, metric: num_zeros, rule: megatron-approximate}}]\n");
  write("z.txt", rule_golden(megatron_sampled(0.0)));
  write("a/train/metrics.jsonl", rule_logged(0.0, {}, 100, "num_zeros"));
  CheckResult r = run(0, "loss_matches");
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_EQ(r.margin.value_or(-1), 0.0);
  write("a/train/metrics.jsonl", rule_logged(0.0, {{10, 1.0}, {20, 1.0}}, 100, "num_zeros"));
  EXPECT_FALSE(run(0, "loss_matches").passed);
}

TEST_F(Checks, MegatronDeterministicComparesBothSidesRoundedToFiveDecimals) {
  load(kDeterministicCase);
  write("g.txt", rule_golden(megatron_sampled(10.0)));
  write("a/train/metrics.jsonl", rule_logged(10.000004));  // 10.00000 to 5 decimals
  CheckResult r = run(0, "loss_matches");
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_EQ(r.message, "megatron-deterministic: all 21 golden steps equal to 5 decimals");
  EXPECT_FALSE(r.margin);

  write("a/train/metrics.jsonl", rule_logged(10.000004, {{15, 10.000006}}));  // 10.00001
  r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed) << "a difference in the fifth decimal passed";
  EXPECT_EQ(r.message,
            "megatron-deterministic: 1 of 21 golden steps differ after rounding to 5 decimals, and none "
            "may; first difference: step 15: loss 10.00001 (10.000006 as logged) in phase train vs 10 in "
            "golden " +
                dir_ + "/g.txt");
  write("a/train/metrics.jsonl", rule_logged(10.0, {}, 100, "loss", {100}));
  EXPECT_FALSE(run(0, "loss_matches").passed) << "a missing step passed";
  write("a/train/metrics.jsonl", rule_logged(10.0, {{100, NAN}}));
  EXPECT_FALSE(run(0, "loss_matches").passed) << "a nan passed";
  // The golden is rounded too: a full-precision golden from `golden export` meets its run.
  write("g.txt", rule_golden(megatron_sampled(10.0000041)));
  write("a/train/metrics.jsonl", rule_logged(10.0000001));
  EXPECT_TRUE(run(0, "loss_matches").passed);
}

TEST_F(Checks, ARuleIsTheOnlySourceOfToleranceAndIsReadOnce) {
  EXPECT_EQ(
      rule_load_errors("  - name: a\n    checks: [{loss_matches: {golden: g.txt, rule: megatron-approximate, rtol: "
                       "0.1}}]\n"),
      "m.yaml:5:79: check loss_matches: rtol and rule 'megatron-approximate' both set the tolerance; the rule "
      "sets it alone, so leave out rtol");
  EXPECT_NE(
      rule_load_errors("  - name: a\n    checks: [{loss_matches: {golden: g.txt, rule: megatron-deterministic, exact: "
                       "true}}]\n")
          .find("exact and rule 'megatron-deterministic' both set the tolerance"),
      std::string::npos);
  EXPECT_EQ(rule_load_errors("  - name: a\n    checks: [{loss_matches: {golden: g.txt, rule: megatron-aproximate}}]\n"),
            "m.yaml:5:51: check loss_matches.rule: unknown rule 'megatron-aproximate'; the rules are "
            "megatron-deterministic, megatron-approximate; did you mean 'megatron-approximate'?");
  EXPECT_NE(rule_load_errors("  - name: a\n    checks: [{resume_matches: {against: a, rule: megatron-approximate}}]\n")
                .find("unknown key 'rule'"),
            std::string::npos);
  // Read once: the check holds the rule, and no tolerance of its own that `show` would print.
  load(kApproximateCase);
  const CheckParams& p = suite_.cases[0].checks[0].params;
  EXPECT_EQ(p.curve_rule, CurveRule::kMegatronApproximate);
  EXPECT_FALSE(p.rtol || p.atol || p.exact);
  EXPECT_EQ(suite_.cases[0].checks[0].to_json()["params"].dump(),
            R"({"golden":"g.txt","metric":"loss","rule":"megatron-approximate"})");
}

TEST_F(Checks, ABandGoldenPassesInsideItsSpreadWidenedByTheTolerance) {
  load("  - name: a\n    checks: [{loss_matches: {golden: b.txt, rtol: 1.0e-3}}]\n");
  write("b.txt", "# meshtest golden band\n1 9.9 10.1\n2 5.0 5.0\n");
  write("a/train/metrics.jsonl", curve({10.05, 5.004}));
  EXPECT_TRUE(run(0, "loss_matches").passed);
  write("a/train/metrics.jsonl", curve({10.2, 5.0}));
  CheckResult r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message,
            "step 1: loss 10.2 in phase train vs band [9.9, 10.1] of golden " + dir_ +
                "/b.txt: 1.00e-01 outside it > atol 0 + rtol 0.001 x |10.1| = 1.01e-02 (1 of 2 steps differ)");
  ASSERT_EQ(r.series.size(), 3u);  // the band's lower and upper ends
  EXPECT_EQ(r.series[2].role, "reference-max");
  write("a/train/metrics.jsonl", curve({9.895, 5.0}));  // under the band's low end, within its tolerance
  EXPECT_TRUE(run(0, "loss_matches").passed);
  write("a/train/metrics.jsonl", curve({9.8, 5.0}));
  EXPECT_FALSE(run(0, "loss_matches").passed);

  load("  - name: a\n    checks: [{loss_matches: {golden: b.txt, exact: true}}]\n");
  write("a/train/metrics.jsonl", curve({10.1, 5.0}));
  EXPECT_TRUE(run(0, "loss_matches").passed);
  write("a/train/metrics.jsonl", curve({10.1001, 5.0}));
  r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("(exact: inside the band required)"), std::string::npos) << r.message;

  load(kApproximateCase);  // a band under Megatron's rule: [9, 10] widened by 5% of each end; one step, no miss allowed
  write("g.txt", "1 9 10\n");
  write("a/train/metrics.jsonl", rule_logged(10.45, {{1, 8.56}}, 5));
  EXPECT_TRUE(run(0, "loss_matches").passed);
  write("a/train/metrics.jsonl", rule_logged(10.45, {{1, 8.5}}, 5));
  r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("step 1: loss 8.5 in phase train vs [9, 10] in golden " + dir_ +
                           "/g.txt: |diff| 5.00e-01 outside the band > atol 0 + rtol 0.05 x |9| = 4.50e-01"),
            std::string::npos)
      << r.message;
}

TEST_F(Checks, NumZerosIsACurveMetricAndValidationLossHasGoldensToo) {
  load("  - name: a\n  - name: b\n    checks: [{loss_matches: {baseline: a, metric: num_zeros, rtol: 1.0e-6}}]\n");
  write("a/train/metrics.jsonl", rule_logged(1000.0, {}, 3, "num_zeros"));
  write("b/train/metrics.jsonl", rule_logged(1000.0, {{2, 1001.0}}, 3, "num_zeros"));
  CheckResult r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message.rfind("step 2: num_zeros 1001 in phase train vs 1000 in baseline s/a (phase train)", 0), 0u)
      << r.message;
  write("b/train/metrics.jsonl", curve({5.0, 5.0, 5.0}));
  EXPECT_EQ(run(1, "loss_matches").message, "phase train reports no num_zeros");
  load("  - name: a\n    checks: [{loss_matches: {golden: g.txt, metric: zeros}}]\n");
  write("g.txt", "1 5\n");
  write("a/train/metrics.jsonl", curve({5.0}));
  EXPECT_EQ(run(0, "loss_matches").message,
            "metric must be loss, grad_norm, validation_loss, num_zeros or tokens_seen, got zeros");
  // A trainer that reports only the loss reports no grad_norm: not judged, rather than nan at every step.
  load("  - name: a\n    checks: [{loss_matches: {golden: g.txt, metric: grad_norm, rule: megatron-approximate}}]\n");
  write("g.txt", "1 1.5\n");
  write("a/train/metrics.jsonl", "{\"step\":1,\"loss\":6}\n");
  r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_FALSE(r.judged);
  EXPECT_EQ(r.message, "phase train reports no grad_norm");
  // A golden of validation losses (before, a golden file held only loss and grad_norm).
  load("  - name: a\n    checks: [{loss_matches: {golden: v.txt, metric: validation_loss, rtol: 1.0e-6}}]\n");
  write("v.txt", "2 5.5\n");
  write("a/train/metrics.jsonl", "{\"step\":1,\"loss\":6}\n{\"step\":2,\"loss\":5,\"validation_loss\":5.5}\n");
  EXPECT_TRUE(run(0, "loss_matches").passed) << run(0, "loss_matches").message;
}

// Mutant: a golden inf makes the tolerance inf (rtol x |inf|), so any finite loss passes.
TEST_F(Checks, AnInfiniteGoldenValueMatchesNoFiniteLoss) {
  load("  - name: a\n    checks: [{loss_matches: {golden: g.txt, rtol: 1.0e-5}}]\n");
  write("g.txt", "1 6.0\n2 inf\n");
  write("a/train/metrics.jsonl", curve({6.0, 5.0}));
  const CheckResult r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed) << "a finite loss matched a golden inf";
  EXPECT_EQ(r.message.rfind("step 2: loss 5 in phase train vs inf in golden", 0), 0u) << r.message;
}

TEST_F(Checks, AGoldenPathKeyedByHardwareIsFilledWithThisMachines) {
  ::setenv("MESHTEST_HARDWARE", "Test GPU 9000 (80GB)", 1);
  load("  - name: a\n    checks: [{loss_matches: {golden: \"golden/{hardware}/a.txt\", rtol: 1.0e-5}}]\n");
  write("a/train/metrics.jsonl", curve({6.0, 5.0}));
  CheckResult r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message,
            "no golden file for this hardware (Test GPU 9000 (80GB), {hardware} = test-gpu-9000-80gb): " + dir_ +
                "/golden/test-gpu-9000-80gb/a.txt does not exist; meshtest golden regen records one "
                "(docs/matrix.md)");
  std::filesystem::create_directories(dir_ + "/golden/test-gpu-9000-80gb");
  write("golden/test-gpu-9000-80gb/a.txt", "1 6.0\n2 5.0\n");
  EXPECT_TRUE(run(0, "loss_matches").passed);
  ::unsetenv("MESHTEST_HARDWARE");
  EXPECT_EQ(rule_load_errors("  - name: a\n    checks: [{loss_matches: {golden: \"golden/{hw}/a.txt\"}}]\n"),
            "m.yaml:5:38: unknown placeholder {hw} in loss_matches.golden; golden paths take {hardware}");
}

// np.isclose's tolerance is rtol x |golden|: a negative loss (a log-likelihood of continuous data)
// within 5% of its golden passes, with the margin a positive one would have.
TEST_F(Checks, MegatronApproximateJudgesANegativeLossByItsSize) {
  load(kApproximateCase);
  write("g.txt", rule_golden(megatron_sampled(-2.0)));
  write("a/train/metrics.jsonl", rule_logged(-2.05));
  const CheckResult r = run(0, "loss_matches");
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_NEAR(r.margin.value_or(-1), 0.5, 1e-9);  // 0.05 of a 0.1 tolerance
}

// A step missing against a golden band is measured from the band's low end (as a NaN loss is),
// with no tolerance, since only a golden nan meets it; the table shows no |diff| for it, and the
// margin is inf.
TEST_F(Checks, AStepMissingAgainstAGoldenBandIsMeasuredFromItsLowEndWithNoTolerance) {
  load(kApproximateCase);
  write("g.txt", "5 9 10\n");
  write("a/train/metrics.jsonl", rule_logged(9.5, {}, 4));
  const CheckResult r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.margin, INFINITY);
  EXPECT_EQ(r.details, "  step  phase train  |  golden " + dir_ +
                           "/g.txt  |  |diff|\n"
                           "     5                         -                   [9, 10]           -  <-\n");
  EXPECT_EQ(outcomes_[0].verdict.step, 5);
  EXPECT_EQ(outcomes_[0].verdict.reference, 9.0);
  EXPECT_EQ(outcomes_[0].verdict.tolerance, 0.0);
}

// A band regenerated over runs one of which diverged is open at its top (`9 inf`); a deterministic
// rerun of the run that set its low end meets that end exactly, and passes.
TEST_F(Checks, ADeterministicRerunMeetsTheFiniteEndOfABandOpenAtTheOther) {
  load(kDeterministicCase);
  write("g.txt", "5 9 inf\n");
  write("a/train/metrics.jsonl", rule_logged(9.0, {}, 5));
  const CheckResult r = run(0, "loss_matches");
  EXPECT_TRUE(r.passed) << r.message << "\n" << r.details;
  EXPECT_EQ(r.message, "megatron-deterministic: all 1 golden steps equal to 5 decimals");
}

// A band open at one end holds every finite loss past its finite end: under a Megatron rule a loss
// of 10 inside `9 inf` (or `-inf 10`) passes, as it does without a rule; one below the finite
// end is measured from it. The rule once sent any band with an infinite end to "an infinity
// meets only itself" and failed the loss inside it, with no reason shown.
TEST_F(Checks, UnderARuleAFiniteLossInsideABandOpenAtOneEndPassesAndOneOutsideIsMeasuredFromItsEnd) {
  load(kApproximateCase);
  write("g.txt", "5 9 inf\n");
  write("a/train/metrics.jsonl", rule_logged(10.0, {}, 5));
  CheckResult r = run(0, "loss_matches");
  EXPECT_TRUE(r.passed) << r.message << "\n" << r.details;
  write("g.txt", "5 -inf 10.2\n");
  r = run(0, "loss_matches");
  EXPECT_TRUE(r.passed) << r.message << "\n" << r.details;
  write("g.txt", "5 20 inf\n");
  r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("1 of 1 golden steps missed"), std::string::npos) << r.message;
  EXPECT_NE(r.details.find("[20, inf]    1.00e+01"), std::string::npos) << r.details;  // 10 below its end
}

// Under a rule, as without one, a golden of single values draws one reference curve and a band
// golden its upper end too: the report's plot shows the band a loss was judged against.
TEST_F(Checks, UnderARuleOnlyABandGoldenDrawsAReferenceMaxCurve) {
  load(kApproximateCase);
  write("g.txt", "1 10\n");
  write("a/train/metrics.jsonl", rule_logged(10.0, {}, 1));
  CheckResult r = run(0, "loss_matches");
  EXPECT_TRUE(r.passed) << r.message;
  ASSERT_EQ(r.series.size(), 2u);
  EXPECT_EQ(r.series[1].role, "reference");
  write("g.txt", "1 9 11\n");
  r = run(0, "loss_matches");
  EXPECT_TRUE(r.passed) << r.message;
  ASSERT_EQ(r.series.size(), 3u);
  EXPECT_EQ(r.series[2].role, "reference-max");
  EXPECT_EQ(r.series[2].points, (std::vector<std::pair<long long, double>>{{1, 11.0}}));
}
