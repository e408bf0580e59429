// The message checks (judge/log_checks.cpp), and their edges: an empty text, the one rank a
// log_contains names, a log past the phase's last rank; `exit`'s message for a timeout, a rank
// behind at a collective, rank 0 failing first. `exit` is tested end to end with real crashing,
// hanging and stubborn processes in run_test.cpp.
#include <csignal>

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

// A timed-out phase whose ranks had all exited by themselves says so ("none"), not an empty
// list: the person triaging knows no rank was left hanging.
TEST_F(Checks, ATimedOutPhaseWithNoRankStillRunningSaysNone) {
  load("  - name: a\n");
  PhaseOutcome& p = outcomes_[0].phases[0];
  p.result.timed_out = true;
  p.result.stopped_because = "timed out after 60 s";
  p.result.exits = {{0, 0, 0}, {1, 0, 0}};
  EXPECT_EQ(run(0, "exit").message, "phase train timed out after 60 s (ranks still running: none)");
}

// A timed-out phase whose collective files show a rank behind the others names that rank as the
// one to blame, and says which collective the rest wait in: that is where the hang is.
TEST_F(Checks, ATimedOutPhaseBlamesTheRankThatDidNotArriveAtTheCollective) {
  load("  - name: a\n    ngpu: 3\n");
  PhaseOutcome& p = outcomes_[0].phases[0];
  p.result.timed_out = true;
  p.result.stopped_because = "timed out after 60 s";
  p.result.exits = {{0, 0, SIGTERM}, {1, 0, SIGTERM}, {2, 0, SIGTERM}};
  write("a/train/collectives_rank0.txt", "collectives_entered=10 last=all_reduce_sum group=dp ranks=3\n");
  write("a/train/collectives_rank1.txt", "collectives_entered=9 last=all_gather group=dp ranks=3\n");
  write("a/train/collectives_rank2.txt", "collectives_entered=10 last=all_reduce_sum group=dp ranks=3\n");
  const CheckResult r = run(0, "exit");
  EXPECT_EQ(r.message,
            "phase train timed out after 60 s (ranks still running: 0,1,2); rank 1 did not arrive: ranks 0,2 wait in "
            "collective #10 (all_reduce_sum group=dp ranks=3); rank 1 entered 9");
  EXPECT_EQ(r.finding.rank, 1);
}

// Rank 0 failing first is a rank failure like any other (rank 0 is no "no rank"): its exit code,
// and the error line of its log when there is one, with nothing dangling when there is none.
TEST_F(Checks, ExitNamesRankZeroFailingFirstAndItsErrorLineOnlyWhenItHasOne) {
  load("  - name: a\n");
  PhaseOutcome& p = outcomes_[0].phases[0];
  p.result.first_failure = {0, 3, 0};
  p.result.exits[0] = {0, 3, 0};
  write("a/train/rank0.log", "meshtrain: step 1\n");
  CheckResult r = run(0, "exit");
  EXPECT_EQ(r.message, "phase train: rank 0 failed first with exit code 3");
  EXPECT_EQ(r.finding.kind, VerdictKind::kExitCode);
  EXPECT_EQ(r.finding.rank, 0);
  write("a/train/rank0.log", "meshtrain: step 1\nmeshtrain: error: out of memory\n");
  r = run(0, "exit");
  EXPECT_EQ(r.message, "phase train: rank 0 failed first with exit code 3: meshtrain: error: out of memory");
}
