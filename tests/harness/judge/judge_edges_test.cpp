// The judge at its edges: a value exactly at its tolerance or at a band's end, a step at either
// end of the subject's span, a reference with no values for the metric, a difference below the
// reference. Each test here killed a survivor of tools/mutate.py (docs/reliability.md), shown red
// on that mutant: a bound made strict, a span end skipped, an empty reference judged as met.
#include <cmath>

#include "harness/judge/checks_fixture.h"
#include "judge/check_context.h"

using namespace meshtest;

// torch.allclose's bound is inclusive: |diff| == atol + rtol x |ref| passes, a hair over fails.
// 5.5 - 5.0 and 0.5 are exact in binary, so the equality is exact too.
TEST_F(Checks, LossMatchesAcceptsADifferenceExactlyAtItsTolerance) {
  load("  - name: a\n  - name: b\n    checks: [{loss_matches: {baseline: a, rtol: 0, atol: 0.5}}]\n");
  write("a/train/metrics.jsonl", curve({6.0, 5.0}));
  write("b/train/metrics.jsonl", curve({6.0, 5.5}));
  CheckResult r = run(1, "loss_matches");
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_EQ(r.margin, 1.0) << "a difference at the tolerance is a margin of exactly 1";
  write("b/train/metrics.jsonl", curve({6.0, 5.500001}));
  EXPECT_FALSE(run(1, "loss_matches").passed);
}

// An exact match against a band golden accepts either end of the band itself.
TEST_F(Checks, AnExactMatchAcceptsBothEndsOfABand) {
  load("  - name: a\n    checks: [{loss_matches: {golden: b.txt, exact: true}}]\n");
  write("b.txt", "# meshtest golden band\n1 9.5 10.5\n2 4.5 5.5\n");
  write("a/train/metrics.jsonl", curve({9.5, 5.5}));
  EXPECT_TRUE(run(0, "loss_matches").passed) << run(0, "loss_matches").message;
  write("a/train/metrics.jsonl", curve({10.5, 4.5}));
  EXPECT_TRUE(run(0, "loss_matches").passed) << run(0, "loss_matches").message;
  write("a/train/metrics.jsonl", curve({9.49, 5.0}));
  EXPECT_FALSE(run(0, "loss_matches").passed);
}

// The reference has the metric at the first and at the last step of the subject's span, where the
// subject logged the step without it (validation runs at some steps): both are skipped steps, not
// steps outside the span.
TEST_F(Checks, AMetricMissingAtEitherEndOfTheSubjectsSpanFails) {
  load(
      "  - name: a\n  - name: b\n    checks: [{loss_matches: {baseline: a, metric: validation_loss, rtol: 1.0e-4}}]\n");
  auto step = [](int s, bool validated) {
    return "{\"step\":" + std::to_string(s) + ",\"loss\":5.0,\"grad_norm\":1.0" +
           (validated ? ",\"validation_loss\":5.0" : "") + "}\n";
  };
  write("a/train/metrics.jsonl", step(1, true) + step(2, true) + step(3, true));
  write("b/train/metrics.jsonl", step(1, false) + step(2, true) + step(3, true));
  CheckResult r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed) << "step 1's validation_loss was never compared";
  EXPECT_NE(r.message.find("has validation_loss at step 1 but phase train skipped it"), std::string::npos) << r.message;
  write("b/train/metrics.jsonl", step(1, true) + step(2, true) + step(3, false));
  r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed) << "step 3's validation_loss was never compared";
  EXPECT_NE(r.message.find("has validation_loss at step 3 but phase train skipped it"), std::string::npos) << r.message;
}

// A Megatron rule against a baseline that logged no grad_norm has nothing to judge by: a failure,
// never a pass over zero steps.
TEST_F(Checks, AMegatronRuleAgainstAReferenceWithoutTheMetricFails) {
  load(
      "  - name: a\n  - name: b\n    checks: [{loss_matches: {baseline: a, metric: grad_norm, "
      "rule: megatron-approximate}}]\n");
  write("a/train/metrics.jsonl", "{\"step\":1,\"loss\":6.0}\n{\"step\":2,\"loss\":5.0}\n");
  write("b/train/metrics.jsonl", curve({6.0, 5.0}));
  const CheckResult r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed) << "a reference without grad_norm matched";
  EXPECT_NE(r.message.find("has no grad_norm"), std::string::npos) << r.message;
}

// params_match's message gives |diff| as a magnitude when the subject is below the reference.
TEST_F(Checks, ParamsMatchGivesTheDifferenceAsAMagnitudeBelowTheReference) {
  load("  - name: a\n  - name: b\n    checks: [{params_match: {baseline: a, rtol: 1.0e-6}}]\n");
  write("a/train/param_digest.json", R"({"params":{"model.w":{"sum":0.5001,"l2":10.0}}})");
  write("b/train/param_digest.json", R"({"params":{"model.w":{"sum":0.5,"l2":10.0}}})");
  const CheckResult r = run(1, "params_match");
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("|diff| 1.00e-04 >"), std::string::npos) << r.message;
}

// A log source's rank beyond the phase's ranks is a mistake in the matrix, named as such, for
// each of the log sources (not a missing log file).
TEST_F(Checks, ALogSourcesRankBeyondThePhasesRanksIsNamed) {
  for (const std::string source :
       {"{from: torchtitan-log, rank: 5}",
        "{from: log-pattern, rank: 5, pattern: 'step=(?P<step>\\d+) l=(?P<loss>\\S+)'}", "{from: megatron, rank: 5}"}) {
    load("  - name: a\n    outputs: {metrics: " + source + "}\n    checks: [loss_finite]\n");
    const CheckResult r = run(0, "loss_finite");
    EXPECT_FALSE(r.passed) << source;
    EXPECT_NE(r.message.find("has 2 ranks; outputs.metrics.rank is 5"), std::string::npos)
        << source << ": " << r.message;
  }
}

// The margin every numeric check reports (|diff| / tolerance, the largest over what it compared):
// an exact match under a zero tolerance is 0, any difference or a NaN against a zero tolerance is
// infinite, and an infinite difference over an infinite bound is infinite, never NaN (which
// std::max would drop, leaving the margin of a clean run).
TEST(WidenMargin, ZeroToleranceNanAndInfiniteOverInfinite) {
  auto margin = [](double diff, double tolerance) {
    CheckResult r;
    widen_margin(r, diff, tolerance);
    return r.margin.value();
  };
  EXPECT_EQ(margin(0, 0), 0);
  EXPECT_TRUE(std::isinf(margin(1e-30, 0)));
  EXPECT_TRUE(std::isinf(margin(NAN, 0)));
  EXPECT_TRUE(std::isinf(margin(NAN, 1e-5)));
  EXPECT_TRUE(std::isinf(margin(INFINITY, INFINITY)));
  EXPECT_EQ(margin(0.5, 0.5), 1);
}

// The tolerance a message quotes is torch.allclose's: atol + rtol x |ref|, for a negative ref too.
TEST(ToleranceText, UsesTheReferencesMagnitude) {
  EXPECT_EQ(tolerance_text(0, 0.5, -2.0), "atol 0 + rtol 0.5 x |-2| = 1.00e+00");
}
