// The message checks (judge/log_checks.cpp), and their edges: an empty text, the one rank a
// log_contains names, a log past the phase's last rank. `exit` is tested end to end with real
// crashing, hanging and stubborn processes in run_test.cpp.
#include "harness/judge/checks_fixture.h"

namespace fs = std::filesystem;
using namespace meshtest;

TEST_F(Checks, LogContainsAndErrorMatchesForExpectedFailures) {
  load(R"(  - name: seed
    expect: {xfail: parametrize keys}
    checks: [{error_matches: {text: "Missing key in checkpoint state_dict"}}, {log_contains: {text: "resumed", rank: 0}}]
)");
  // The phase exited 0: error_matches fails, so the xfail is not what was declared.
  write("seed/train/rank0.log", "meshtrain: resumed\n");
  write("seed/train/rank1.log", "");
  EXPECT_EQ(run(0, "error_matches").message,
            "phase train exited 0 on every rank; expected it to fail with 'Missing key in checkpoint state_dict'");
  EXPECT_EQ(outcomes_[0].status(), Status::kFailed);
  // It failed, with another error.
  outcomes_[0].phases[0].result.first_failure = {1, 1, 0};
  outcomes_[0].phases[0].result.exits[1] = {1, 1, 0};
  write("seed/train/rank1.log", "meshtrain: error: out of memory\n");
  EXPECT_EQ(run(0, "error_matches").message,
            "phase train: rank 1 failed (exit code 1) but not with 'Missing key in checkpoint state_dict'; its last "
            "line: meshtrain: error: out of memory");
  EXPECT_EQ(outcomes_[0].status(), Status::kFailed);
  EXPECT_EQ(outcomes_[0].verdict.kind, VerdictKind::kXfailedDifferently);
  EXPECT_NE(outcomes_[0].reason().find("xfail (parametrize keys) failed differently"), std::string::npos);
  // It failed the declared way: xfailed.
  write("seed/train/rank1.log",
        "meshtrain: error: Missing key in checkpoint state_dict: model.tok_embeddings.weight.\n");
  EXPECT_TRUE(run(0, "error_matches").passed);
  EXPECT_EQ(outcomes_[0].status(), Status::kXfailed);
  write("seed/train/rank0.log", "");
  EXPECT_EQ(run(0, "log_contains").message, "no log of phase train rank 0 contains 'resumed'");
}

// An empty text would be found in every log: the loader refuses it, for both checks, with the
// place in the matrix.
TEST_F(Checks, LogContainsAndErrorMatchesRefuseAnEmptyTextWhenTheMatrixLoads) {
  std::string errors;
  try {
    load(R"(  - name: a
    checks: [{log_contains: {text: ""}}, {error_matches: {text: ""}}]
)");
  } catch (const MatrixError& e) {
    errors = e.what();
  }
  EXPECT_NE(errors.find("m.yaml:5:36: log_contains.text is empty: say what the log must contain"), std::string::npos)
      << errors;
  EXPECT_NE(errors.find("m.yaml:5:65: error_matches.text is empty: say what the log must contain"), std::string::npos)
      << errors;
}

// log_contains with a rank reads that rank's log alone: the text in another rank's log fails it.
TEST_F(Checks, LogContainsWithARankReadsOnlyThatRanksLog) {
  load("  - name: a\n    checks: [{log_contains: {text: resumed, rank: 0}}]\n");
  write("a/train/rank0.log", "meshtrain: step 1\n");
  write("a/train/rank1.log", "meshtrain: resumed\n");
  const CheckResult r = run(0, "log_contains");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message, "no log of phase train rank 0 contains 'resumed'");
}

// log_contains reads the phase's ranks only: a rank2.log left in a 2-rank phase's folder (by a run
// with more ranks) holding the text does not pass it.
TEST_F(Checks, LogContainsReadsNoLogPastThePhasesLastRank) {
  load("  - name: a\n    checks: [{log_contains: {text: resumed}}]\n");
  write("a/train/rank0.log", "meshtrain: step 1\n");
  write("a/train/rank1.log", "meshtrain: step 1\n");
  write("a/train/rank2.log", "meshtrain: resumed\n");
  const CheckResult r = run(0, "log_contains");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message, "no log of phase train contains 'resumed'");
}
