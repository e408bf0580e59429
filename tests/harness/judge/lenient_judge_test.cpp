// The judge must not go soft: each test here fails on one realistic edit that would make a
// check lenient (issue 47's held-out mutants of the judge), and says which.
#include "harness/judge/checks_fixture.h"

using namespace meshtest;

// Mutant: params_match compares with |x - y| > tol, so a NaN passes. A trainer writes a
// non-finite digest as null (JSON has no NaN); it must fail, on either side or both.
TEST_F(Checks, ParamsMatchFailsOnANonFiniteDigest) {
  load("  - name: a\n  - name: b\n    checks: [{params_match: {baseline: a, rtol: 1.0e-3}}]\n");
  write("a/train/param_digest.json", R"({"params":{"model.w":{"sum":0.5,"l2":10.0}}})");
  for (const char* digest : {R"({"params":{"model.w":{"sum":null,"l2":10.0}}})", R"({"params":{"model.w":{"sum":0.5,"l2":null}}})"}) {
    write("b/train/param_digest.json", digest);
    const CheckResult r = run(1, "params_match");
    EXPECT_FALSE(r.passed) << "a NaN digest passed: " << digest;
    EXPECT_NE(r.message.find("model.w"), std::string::npos) << r.message;
  }
  write("a/train/param_digest.json", R"({"params":{"model.w":{"sum":null,"l2":null}}})");
  write("b/train/param_digest.json", R"({"params":{"model.w":{"sum":null,"l2":null}}})");
  EXPECT_FALSE(run(1, "params_match").passed) << "a NaN weight matched a NaN weight";
}

// Mutant: loss_finite looks at the loss only, so an inf grad norm with a finite loss passes.
TEST_F(Checks, LossFiniteFailsOnAnInfiniteGradNormWithAFiniteLoss) {
  load("  - name: a\n    checks: [loss_finite]\n");
  write("a/train/metrics.jsonl", "{\"step\":1,\"loss\":5.0,\"grad_norm\":1.0}\n{\"step\":2,\"loss\":4.0,\"grad_norm\":null}\n");
  const CheckResult r = run(0, "loss_finite");
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("grad_norm"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("step 2"), std::string::npos) << r.message;
}

// Mutant: `exact: true` accepting differences below 1e-6.
TEST_F(Checks, ExactMatchingAcceptsNoEpsilon) {
  load("  - name: a\n  - name: b\n    checks: [{loss_matches: {baseline: a, exact: true}}]\n");
  write("a/train/metrics.jsonl", curve({6.0, 5.0}));
  write("b/train/metrics.jsonl", "{\"step\":1,\"loss\":6.0,\"grad_norm\":1.0}\n{\"step\":2,\"loss\":5.0000000001,\"grad_norm\":1.0}\n");
  const CheckResult r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed) << "exact matching let a 1e-10 difference through";
  EXPECT_NE(r.message.find("(exact match required)"), std::string::npos) << r.message;
}

// Mutant: a signed difference, so any value below the reference passes.
TEST_F(Checks, LossMatchesFailsBelowTheReferenceAsAboveIt) {
  load("  - name: a\n  - name: b\n    checks: [{loss_matches: {baseline: a, rtol: 1.0e-4}}]\n");
  write("a/train/metrics.jsonl", curve({6.0, 5.0}));
  write("b/train/metrics.jsonl", curve({6.0, 4.0}));
  const CheckResult r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed) << "a loss 20% below the reference passed";
  EXPECT_NE(r.message.find("step 2: loss 4 in phase train vs 5"), std::string::npos) << r.message;
}

// Mutant: the log reader drops a last line with no newline (a rank killed mid-write), so the
// step where the loss blew up is never read.
TEST_F(Checks, TheLastLogLineCountsWithoutANewline) {
  load("  - name: a\n    outputs: {metrics: {from: log-pattern, pattern: 'it=(?P<step>\\d+) l=(?P<loss>\\S+)'}}\n"
       "    checks: [loss_finite]\n");
  write("a/train/rank0.log", "it=1 l=6.0\nit=2 l=5.0\nit=3 l=inf");
  const CheckResult r = run(0, "loss_finite");
  EXPECT_FALSE(r.passed) << "the unterminated last line (step 3, loss inf) was not read";
  EXPECT_NE(r.message.find("step 3"), std::string::npos) << r.message;
}

// Mutant: the curves compared only on the steps both sides have, so a step the subject never
// logged (a skipped step) passes.
TEST_F(Checks, AStepMissingOnOneSideFailsTheComparison) {
  load("  - name: a\n  - name: b\n    checks: [{loss_matches: {baseline: a, rtol: 1.0e-4}}]\n");
  write("a/train/metrics.jsonl", curve({6.0, 5.0, 4.0}));
  write("b/train/metrics.jsonl", "{\"step\":1,\"loss\":6.0,\"grad_norm\":1.0}\n{\"step\":3,\"loss\":4.0,\"grad_norm\":1.0}\n");
  const CheckResult r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed) << "a curve without step 2 matched one with it";
  EXPECT_NE(r.message.find("2"), std::string::npos) << r.message;
}
