// The curve checks (judge/curve_checks.cpp), each failing on a known-bad curve with the
// message a person needs (what, where, expected vs got, tolerance) and passing on a good one.
#include "harness/judge/checks_fixture.h"

namespace fs = std::filesystem;
using namespace meshtest;

TEST_F(Checks, LossFiniteNamesTheStep) {
  load("  - name: a\n    checks: [loss_finite]\n");
  write("a/train/metrics.jsonl", curve({5.0, 4.0}) + "{\"step\":3,\"loss\":null,\"grad_norm\":1}\n");
  const auto r = run(0, "loss_finite");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message, "phase train: loss is nan at step 3");
  write("a/train/metrics.jsonl", curve({5.0, 4.0}));
  EXPECT_TRUE(run(0, "loss_finite").passed);
}

TEST_F(Checks, LossDecreasesGivesBothEndsAndTheBound) {
  load("  - name: a\n    checks: [{loss_decreases: {factor: 0.5}}]\n");
  write("a/train/metrics.jsonl", curve({6.0, 5.0, 4.0}));
  const auto r = run(0, "loss_decreases");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message, "phase train: loss went 6 (step 1) -> 4 (step 3); expected <= 0.5 x 6 = 3");
  write("a/train/metrics.jsonl", curve({6.0, 2.9}));
  EXPECT_TRUE(run(0, "loss_decreases").passed);
}

TEST_F(Checks, LossMatchesABaselineWithinTolerance) {
  load("  - name: fsdp\n  - name: tp\n    checks: [{loss_matches: {baseline: fsdp, rtol: 1.0e-4}}]\n");
  write("fsdp/train/metrics.jsonl", curve({6.0, 5.0, 4.0}));
  write("tp/train/metrics.jsonl", curve({6.0, 5.0001, 4.01}));
  const auto r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message,
            "step 3: loss 4.01 in phase train vs 4 in baseline s/fsdp (phase train): |diff| 1.00e-02 > atol 0 + "
            "rtol 0.0001 x |4| = 4.00e-04 (1 of 3 steps differ)");
  EXPECT_NE(r.details.find("<-"), std::string::npos) << r.details;
  EXPECT_EQ(outcomes_[1].status(), Status::kFailed);
  // The verdict carries what the message says, as data: the report draws from it.
  const Verdict& v = outcomes_[1].verdict;
  EXPECT_EQ(v.kind, VerdictKind::kCheckFailed);
  EXPECT_EQ(v.check, "loss_matches");
  EXPECT_EQ(v.phase, "train");
  EXPECT_EQ(v.step, 3);
  EXPECT_DOUBLE_EQ(v.value.value_or(0), 4.01);
  EXPECT_DOUBLE_EQ(v.reference.value_or(0), 4.0);
  EXPECT_DOUBLE_EQ(v.tolerance.value_or(0), 4e-4);
  ASSERT_EQ(r.series.size(), 2u);
  EXPECT_EQ(r.series[0].role, "subject");
  EXPECT_EQ(r.series[1].label, "baseline s/fsdp (phase train)");
  EXPECT_EQ(r.series[1].points.size(), 3u);
  EXPECT_EQ(r.band, std::make_pair(1e-4, 0.0));
  write("tp/train/metrics.jsonl", curve({6.0, 5.0001, 4.0002}));
  EXPECT_TRUE(run(1, "loss_matches").passed);
}

TEST_F(Checks, ValidationLossIsComparedOnTheStepsThatValidated) {
  load(
      "  - name: fsdp\n  - name: pp\n    checks: [{loss_matches: {baseline: fsdp, metric: validation_loss, rtol: 1.0e-4}}]\n");
  const std::string both =
      "{\"step\":1,\"loss\":6,\"grad_norm\":1}\n{\"step\":2,\"loss\":5,\"grad_norm\":1,"
      "\"validation_loss\":5.5}\n";
  write("fsdp/train/metrics.jsonl", both);
  write("pp/train/metrics.jsonl", both);
  auto r = run(1, "loss_matches");
  EXPECT_TRUE(r.passed) << r.message;
  ASSERT_EQ(r.series.size(), 2u);
  EXPECT_EQ(r.series[0].points.size(), 1u);  // step 2 only
  write("pp/train/metrics.jsonl",
        "{\"step\":1,\"loss\":6,\"grad_norm\":1}\n{\"step\":2,\"loss\":5,\"grad_norm\":1,"
        "\"validation_loss\":5.6}\n");
  r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message,
            "step 2: validation_loss 5.6 in phase train vs 5.5 in baseline s/fsdp (phase train): |diff| "
            "1.00e-01 > atol 0 + rtol 0.0001 x |5.5| = 5.50e-04 (1 of 1 steps differ)");
  write("pp/train/metrics.jsonl", curve({6.0, 5.0}));
  r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message, "phase train reports no validation_loss");  // a command case: its adapter cannot tell how

  write("pp/train/metrics.jsonl", both);
  write("fsdp/train/metrics.jsonl", curve({6.0, 5.0}));
  r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message, "phase train has validation_loss at step 2 but baseline s/fsdp (phase train) has none there");
}

TEST_F(Checks, LossMatchesAGoldenFileAndExactMatching) {
  load("  - name: a\n    checks: [{loss_matches: {golden: losses.txt, exact: true}}]\n");
  write("losses.txt", "1 6.0\n2 5.0\n");
  write("a/train/metrics.jsonl", curve({6.0, 5.00001}));
  const auto r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("step 2: loss 5.00001 in phase train vs 5 in golden " + dir_ +
                           "/losses.txt: |diff| 1.00e-05 "
                           "(exact match required)"),
            std::string::npos)
      << r.message;
  write("a/train/metrics.jsonl", curve({6.0, 5.0, 4.0}));
  EXPECT_EQ(run(0, "loss_matches").message, "phase train has step 3 but golden " + dir_ + "/losses.txt has steps 1-2");
}

TEST_F(Checks, ResumeMatchesNeedsAResumeAndTheSameLosses) {
  load(R"(  - name: straight
  - name: resumed
    phases: [{name: save}, {name: load}]
    checks: [{resume_matches: {phase: load, baseline: straight}}]
)");
  write("straight/train/metrics.jsonl", curve({6.0, 5.0, 4.0, 3.0}));
  write("resumed/load/metrics.jsonl", curve({6.0, 5.0, 4.0, 3.0}));
  EXPECT_EQ(run(1, "resume_matches").message, "phase load started at step 1: it did not resume from a checkpoint");
  write("resumed/load/metrics.jsonl", curve({4.0, 3.5}, 3));  // the dataloader was not restored
  const auto r = run(1, "resume_matches");
  EXPECT_NE(r.message.find("step 4: loss 3.5 in phase load (resumed) vs 3 in baseline s/straight (phase train) "
                           "(uninterrupted)"),
            std::string::npos)
      << r.message;
  write("resumed/load/metrics.jsonl", curve({4.0, 3.0}, 3));
  EXPECT_TRUE(run(1, "resume_matches").passed);
}

// metric: tokens_seen: a resume whose losses match but whose count of tokens starts over (the
// data position restored, its counter not) is caught, exactly, by step.
TEST_F(Checks, ResumeMatchesJudgesTokensSeenWhenAsked) {
  load(R"(  - name: straight
  - name: resumed
    phases: [{name: save}, {name: load}]
    checks: [{resume_matches: {phase: load, baseline: straight, metric: tokens_seen, exact: true}}]
)");
  write("straight/train/metrics.jsonl",
        "{\"step\":1,\"loss\":6,\"tokens_seen\":512}\n{\"step\":2,\"loss\":5,\"tokens_seen\":1024}\n"
        "{\"step\":3,\"loss\":4,\"tokens_seen\":1536}\n");
  write("resumed/load/metrics.jsonl",
        "{\"step\":2,\"loss\":5,\"tokens_seen\":1024}\n{\"step\":3,\"loss\":4,\"tokens_seen\":1536}\n");
  EXPECT_TRUE(run(1, "resume_matches").passed) << run(1, "resume_matches").message;
  write("resumed/load/metrics.jsonl",
        "{\"step\":2,\"loss\":5,\"tokens_seen\":512}\n{\"step\":3,\"loss\":4,\"tokens_seen\":1024}\n");
  const auto r = run(1, "resume_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("step 2: tokens_seen 512 in phase load (resumed) vs 1024"), std::string::npos) << r.message;
  write("resumed/load/metrics.jsonl", "{\"step\":2,\"loss\":5}\n{\"step\":3,\"loss\":4}\n");
  EXPECT_NE(run(1, "resume_matches").message.find("reports no tokens_seen"), std::string::npos)
      << run(1, "resume_matches").message;
}

// ---- outputs: a foreign trainer's numbers -----------------------------------------

namespace {
// torchtitan's line as it prints it: prefixes, colours, 8.5f loss.
std::string titan_line(int step, double loss) {
  char line[400];
  std::snprintf(line, sizeof(line),
                "[rank1]:[titan] 2026-05-18 16:04:46,338 - root - INFO - \033[31mstep: %2d  \033[32mloss: %8.5f  "
                "\033[38;2;180;60;0mgrad_norm:  0.8319  \033[38;2;54;234;195mmemory:  9.46GiB(64.99%%)  "
                "\033[34mtps: 7,282  \033[36mtflops: 0.52  \033[35mmfu: N/A\033[39m\n",
                step, loss);
  return line;
}
}  // namespace

TEST_F(Checks, LossMatchesReadsATorchtitanLogOrAUserPattern) {
  load(R"(  - name: base
  - name: titan
    outputs: {metrics: {from: torchtitan-log, rank: 1}}
    checks: [{loss_matches: {baseline: base, rtol: 1.0e-4}}]
  - name: mine
    outputs: {metrics: {from: log-pattern, pattern: 'it=(?P<step>\d+) l=(?P<loss>\S+)'}}
    checks: [{loss_matches: {baseline: base, rtol: 1.0e-4}}]
)");
  write("base/train/metrics.jsonl", curve({6.0, 5.0}));
  EXPECT_EQ(run(1, "loss_matches").message, "cannot read " + dir_ + "/titan/train/rank1.log");
  write("titan/train/rank1.log", "starting\n" + titan_line(1, 6.0) + titan_line(2, 5.01));
  EXPECT_EQ(run(1, "loss_matches").message,
            "step 2: loss 5.01 in phase train vs 5 in baseline s/base (phase train): |diff| 1.00e-02 > atol 0 + "
            "rtol 0.0001 x |5| = 5.00e-04 (1 of 2 steps differ)");
  write("titan/train/rank1.log", titan_line(1, 6.0) + titan_line(2, 5.0));
  EXPECT_TRUE(run(1, "loss_matches").passed);
  write("mine/train/rank0.log", "it=1 l=6.0\nnoise\nit=2 l=5.0\n");
  EXPECT_TRUE(run(2, "loss_matches").passed) << run(2, "loss_matches").message;
  write("mine/train/rank0.log", "it=1 x\n");
  EXPECT_EQ(run(2, "loss_matches").message,
            "no loss values in rank 0's log through pattern 'it=(?P<step>\\d+) l=(?P<loss>\\S+)' (" + dir_ +
                "/mine/train/rank0.log)");
}

// torchtitan logs its validation loss as `validate step: N  loss: ...`; a check names it
// validation_loss whichever source it comes from (issue 36, finding 2).
TEST_F(Checks, ValidationLossFromATorchtitanLogMatchesOneFromMetricsJsonl) {
  load(R"(  - name: base
  - name: titan
    outputs: {metrics: {from: torchtitan-log, rank: 1}}
    checks: [{loss_matches: {baseline: base, metric: validation_loss, rtol: 1.0e-4}}]
)");
  write("base/train/metrics.jsonl",
        "{\"step\":1,\"loss\":6,\"grad_norm\":1}\n{\"step\":2,\"loss\":5,\"grad_norm\":1,"
        "\"validation_loss\":5.5}\n");
  const std::string validate =
      "[rank1]:[titan] 2026-05-18 16:04:47,001 - root - INFO - \033[33mvalidate step:  2  "
      "\033[32mloss:  5.5000  \033[38;2;54;234;195mmemory:  9.46GiB(64.99%)  "
      "\033[34mtps: 9,100\033[39m\n";
  write("titan/train/rank1.log", titan_line(1, 6.0) + titan_line(2, 5.0) + validate);
  const auto r = run(1, "loss_matches");
  EXPECT_TRUE(r.passed) << r.message;
  ASSERT_EQ(r.series.size(), 2u);
  EXPECT_EQ(r.series[0].points, (std::vector<std::pair<long long, double>>{{2, 5.5}}));
}
