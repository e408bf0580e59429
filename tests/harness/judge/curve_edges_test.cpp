// The edges of the curve checks (judge/curve_checks.cpp) where a slip would change a verdict or
// the message a person triages by. Reading a curve: a blank line inside metrics.jsonl and a file
// with no step, which of a Megatron phase's files is its last rank's log (and rank 0 when the
// matrix names it), a log source's rank one past the last, Megatron's TensorBoard folder without
// `lm loss`, the TensorBoard tags listed when no loss was found, a step with no loss, the ten
// warnings a failure shows, a Hugging Face Trainer phase resumed from a checkpoint. Comparing
// curves: when a miss is said to be the logged rounding's (trainer_state.json's 4 decimals, not a
// full-float file; Megatron's 7 digits of the largest finite loss; a tolerance not under the
// rounding), a golden band's table and curves, a band open at an end, NaN and infinite losses
// against a band, a negative loss under rtol, a skipped step of a resumed run. loss_decreases' bound
// and margin; a drift rule that cannot be met (drift's other edges are in drift_check_test.cpp).
// What meshtest diff, golden export and
// the report read: a trainer that logs only the loss, a metric never logged, a first step without
// grad_norm, a phase that did not run. Each test was shown red on the mutant of tools/mutate.py
// that it kills.
#include "harness/judge/checks_fixture.h"
#include "harness/readers/tensorboard_events.h"

namespace fs = std::filesystem;
using namespace meshtest;

namespace {

class CurveEdges : public Checks {};

// Megatron's iteration line (its last rank prints it).
std::string megatron_line(int step, const char* loss) {
  return " iteration        " + std::to_string(step) + "/       2 | lm loss: " + loss + " | grad norm: 1.000 |\n";
}

// The baseline `ref`'s metrics.jsonl: loss 10.5 at step 1, 9.25 at step 2.
const char kRef[] = "{\"step\":1,\"loss\":10.5,\"grad_norm\":1.0}\n{\"step\":2,\"loss\":9.25,\"grad_norm\":1.0}\n";

}  // namespace

// A blank line inside metrics.jsonl (a writer's extra newline) is skipped: the steps after it are
// read, so the loss is seen to fall, and meshtest diff reads the whole curve.
TEST_F(CurveEdges, ABlankLineInsideMetricsJsonlIsSkippedAndTheStepsAfterItAreRead) {
  load("  - name: a\n    checks: [{loss_decreases: {factor: 0.7}}]\n");
  write("a/train/metrics.jsonl", curve({10.0}) + "\n" + curve({8.0, 6.0}, 2) + "\n");
  const CheckResult r = run(0, "loss_decreases");
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_EQ(read_loss_curve(dir_ + "/a/train", Outputs{}, "loss", std::nullopt),
            (std::map<long long, double>{{1, 10.0}, {2, 8.0}, {3, 6.0}}));
}

// A metrics.jsonl without a step (a trainer that died before its first one) fails loss_finite
// with the file named: nothing checked is no pass.
TEST_F(CurveEdges, AMetricsJsonlWithNoStepFailsLossFiniteNamingTheFile) {
  load("  - name: a\n    checks: [loss_finite]\n");
  write("a/train/metrics.jsonl", "\n\n");
  const CheckResult r = run(0, "loss_finite");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message, dir_ + "/a/train/metrics.jsonl has no steps");
}

// Megatron's line is read from the highest rank<N>.log of the phase folder (its last rank). The
// files beside them are no rank's log, wherever the folder lists them: torchrun's
// error_rank<N>.json, Slurm's srun.log, a wrapper's node20.log and rank20.err (numbered past the
// last rank, so that one taken for a rank's log would show), a merged rank_all.log, Megatron's own
// folders. (Sixteen ranks: of 38 entries, one that is no rank log almost surely comes before
// rank15.log, in whatever order the file system lists them.)
TEST_F(CurveEdges, MegatronsLastRankIsTheHighestRankLogAndOtherFilesAreNotRanks) {
  load(
      "  - name: ref\n"
      "  - name: mg\n"
      "    ngpu: 16\n"
      "    outputs: {metrics: {from: megatron}}\n"
      "    checks: [{loss_matches: {baseline: ref, exact: true}}]\n");
  write("ref/train/metrics.jsonl", kRef);
  for (int rank = 0; rank < 16; ++rank) {
    write("mg/train/error_rank" + std::to_string(rank) + ".json", "{}");
    write("mg/train/rank" + std::to_string(rank) + ".log",
          rank < 15 ? "no iteration line on this rank\n"
                    : megatron_line(1, "1.050000E+01") + megatron_line(2, "9.250000E+00"));
  }
  write("mg/train/srun.log", "srun: job 7 queued\n");
  write("mg/train/node20.log", megatron_line(1, "1.0E+00"));
  write("mg/train/rank20.err", "a rank's stderr\n");
  write("mg/train/rank_all.log", "every rank's lines, merged\n");
  fs::create_directories(dir_ + "/mg/train/tensorboard");
  fs::create_directories(dir_ + "/mg/train/checkpoint");
  const CheckResult r = run(1, "loss_matches");
  EXPECT_TRUE(r.passed) << r.message << "\n" << r.details;
}

// A Megatron TensorBoard folder with scalars but no `lm loss` is not the curve: the loss comes from
// the last rank's iteration line.
TEST_F(CurveEdges, MegatronTensorBoardWithoutLmLossFallsBackToTheIterationLine) {
  load(
      "  - name: ref\n"
      "  - name: mg\n"
      "    outputs: {metrics: {from: megatron}}\n"
      "    checks: [{loss_matches: {baseline: ref, exact: true}}]\n");
  write("ref/train/metrics.jsonl", kRef);
  fs::create_directories(dir_ + "/mg/train/tensorboard");
  write("mg/train/tensorboard/events.out.tfevents.1700000000.host.1.0",
        tensorboard_events::events_file(
            {{1, {{"learning-rate", 1e-4f}, {"grad-norm", 1.0f}}}, {2, {{"learning-rate", 1e-4f}}}}));
  write("mg/train/rank1.log", megatron_line(1, "1.050000E+01") + megatron_line(2, "9.250000E+00"));
  const CheckResult r = run(1, "loss_matches");
  EXPECT_TRUE(r.passed) << r.message << "\n" << r.details;
}

// `rank: 0` in outputs.metrics reads rank0.log, even when a higher rank left a log too.
TEST_F(CurveEdges, MegatronRankZeroNamedInTheMatrixIsReadThoughAHigherRankLogged) {
  load(
      "  - name: ref\n"
      "  - name: mg\n"
      "    outputs: {metrics: {from: megatron, rank: 0}}\n"
      "    checks: [{loss_matches: {baseline: ref, exact: true}}]\n");
  write("ref/train/metrics.jsonl", kRef);
  write("mg/train/rank0.log", megatron_line(1, "1.050000E+01") + megatron_line(2, "9.250000E+00"));
  write("mg/train/rank1.log", "rank 1 started\n");
  const CheckResult r = run(1, "loss_matches");
  EXPECT_TRUE(r.passed) << r.message << "\n" << r.details;
}

// TensorBoard scalars without the loss's tag: the failure lists the tags the folder holds
// ("lr, tflops"; a renamed tag is the usual cause), or "none" when it holds no scalar.
TEST_F(CurveEdges, TensorBoardWithoutTheLossTagListsTheTagsItHolds) {
  load(
      "  - name: tags\n"
      "    outputs: {metrics: {from: tensorboard}}\n"
      "    checks: [loss_finite]\n"
      "  - name: empty\n"
      "    outputs: {metrics: {from: tensorboard}}\n"
      "    checks: [loss_finite]\n");
  fs::create_directories(dir_ + "/tags/train/tb");
  fs::create_directories(dir_ + "/empty/train/tb");
  write("tags/train/tb/events.out.tfevents.1700000000.host.1.0",
        tensorboard_events::events_file({{1, {{"tflops", 1.5f}, {"lr", 1e-4f}}}, {2, {{"lr", 1e-4f}}}}));
  write("empty/train/tb/events.out.tfevents.1700000000.host.1.0", tensorboard_events::events_file({}));
  const CheckResult tags = run(0, "loss_finite");
  EXPECT_EQ(tags.message, "no loss values in TensorBoard scalars in tb (" + dir_ + "/tags/train/tb)");
  EXPECT_EQ(tags.details, "scalar tags in " + dir_ + "/tags/train/tb: lr, tflops\n");
  const CheckResult empty = run(1, "loss_finite");
  EXPECT_EQ(empty.details, "scalar tags in " + dir_ + "/empty/train/tb: none\n");
}

// A step with no loss (the Trainer's eval_on_start logs an eval_loss at step 0) is left out, and
// the steps after it are the curve.
TEST_F(CurveEdges, AStepWithoutALossIsLeftOutAndTheStepsAfterItAreRead) {
  load(
      "  - name: ref\n"
      "  - name: hf\n"
      "    outputs: {metrics: {from: hf-trainer-state}}\n"
      "    checks: [{loss_matches: {baseline: ref, exact: true}}]\n");
  write("ref/train/metrics.jsonl", kRef);
  write("hf/train/trainer_state.json",
        R"({"global_step": 2, "log_history": [{"eval_loss": 11.0, "step": 0},
            {"loss": 10.5, "grad_norm": 1.0, "step": 1}, {"loss": 9.25, "grad_norm": 1.0, "step": 2}]})");
  const CheckResult r = run(1, "loss_matches");
  EXPECT_TRUE(r.passed) << r.message << "\n" << r.details;
}

// When no loss could be read, the failure's details show the reader's first ten warnings, no more.
TEST_F(CurveEdges, NoLossValuesShowsTheFirstTenWarnings) {
  load("  - name: titan\n    outputs: {metrics: {from: torchtitan-log}}\n    checks: [loss_finite]\n");
  std::string log;
  for (int step = 1; step <= 12; ++step) log += "step: " + std::to_string(step) + "  loss: x\n";
  write("titan/train/rank0.log", log);
  const CheckResult r = run(0, "loss_finite");
  EXPECT_EQ(r.message, "no loss values in the torchtitan log of rank 0 (" + dir_ + "/titan/train/rank0.log)");
  std::string first_ten;
  for (int line = 1; line <= 10; ++line)
    first_ten += dir_ + "/titan/train/rank0.log:" + std::to_string(line) + ": step " + std::to_string(line) +
                 ": loss 'x' is not a number, left out\n";
  EXPECT_EQ(r.details, first_ten);
}

// Only a Hugging Face Trainer phase is cut at the checkpoint it resumed from: a trainer of one's
// own with a --resume_from_checkpoint option of the same name keeps every step it logged.
TEST_F(CurveEdges, OnlyAHuggingFaceTrainerPhaseIsCutAtItsResumeFromCheckpoint) {
  load(
      "  - name: ref\n"
      "  - name: own\n"
      "    phases:\n"
      "      - {name: save}\n"
      "      - {name: resume, options: {resume_from_checkpoint: \"{case_dir}/save\"}}\n"
      "    checks: [{resume_matches: {phase: resume, baseline: ref, exact: true}}]\n");
  write("ref/train/metrics.jsonl", kRef + std::string("{\"step\":3,\"loss\":8.5,\"grad_norm\":1.0}\n"));
  write("own/save/metrics.jsonl", kRef);
  write("own/resume/metrics.jsonl",
        "{\"step\":2,\"loss\":9.25,\"grad_norm\":1.0}\n{\"step\":3,\"loss\":8.5,\"grad_norm\":1.0}\n");
  const CheckResult r = run(1, "resume_matches");
  EXPECT_TRUE(r.passed) << r.message;
}

// A Trainer phase resumed from a folder whose step cannot be read names that folder as the matrix
// gave it, and why.
TEST_F(CurveEdges, AResumeFromACheckpointWithoutItsStepNamesTheFolder) {
  load(
      "  - name: hf\n"
      "    outputs: {metrics: {from: hf-trainer-state}}\n"
      "    phases:\n"
      "      - {name: save}\n"
      "      - {name: resume, options: {resume_from_checkpoint: \"{case_dir}/save\"}}\n"
      "    checks: [{loss_finite: {phase: resume}}]\n");
  write("hf/resume/trainer_state.json", R"({"global_step": 3, "log_history": [{"loss": 8.5, "step": 3}]})");
  const CheckResult r = run(0, "loss_finite");
  EXPECT_EQ(r.message, "phase resume resumed from {case_dir}/save, whose step cannot be read: " + dir_ +
                           "/hf/save: holds no trainer_state.json, nor a checkpoint-<N> folder with one");
}

// A Trainer phase resumed at step 2 that logged nothing after it fails, saying so; it does not
// pass loss_finite with no step checked.
TEST_F(CurveEdges, AResumedTrainerPhaseThatLoggedNoNewStepFailsSayingSo) {
  load(
      "  - name: hf\n"
      "    outputs: {metrics: {from: hf-trainer-state}}\n"
      "    phases:\n"
      "      - {name: save}\n"
      "      - {name: resume, options: {resume_from_checkpoint: \"{case_dir}/save\"}}\n"
      "    checks: [{loss_finite: {phase: resume}}]\n");
  const std::string two =
      R"({"global_step": 2, "log_history": [{"loss": 10.5, "step": 1}, {"loss": 9.25, "step": 2}]})";
  fs::create_directories(dir_ + "/hf/save/checkpoint-2");
  write("hf/save/checkpoint-2/trainer_state.json", two);
  write("hf/resume/trainer_state.json", two);
  const CheckResult r = run(0, "loss_finite");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message, "phase resume logged no step after step 2, where it resumed");
}

// Ranks count from 0: a log source's `rank: 2` in a phase of 2 ranks is past its last rank, named
// as the matrix's mistake, even where a rank2.log lies about (left by a run with more ranks).
TEST_F(CurveEdges, ALogSourcesRankEqualToTheRankCountIsPastTheLastRank) {
  load("  - name: titan\n    outputs: {metrics: {from: torchtitan-log, rank: 2}}\n    checks: [loss_finite]\n");
  write("titan/train/rank2.log", "step: 1  loss: 10.5\nstep: 2  loss: 9.25\n");
  const CheckResult r = run(0, "loss_finite");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message, "phase train has 2 ranks; outputs.metrics.rank is 2");
}

// A metrics.jsonl is written in full floats: losses that happen to be multiples of 1e-4 are not
// taken for the Trainer's rounding, so a miss under a tight tolerance does not tell the user to
// loosen it.
TEST_F(CurveEdges, AMetricsJsonlMissIsNotSaidToBeRoundedThoughItsLossesEndIn4Decimals) {
  load("  - name: ref\n  - name: a\n    checks: [{loss_matches: {baseline: ref, exact: true}}]\n");
  write("ref/train/metrics.jsonl", kRef);
  write("a/train/metrics.jsonl",
        "{\"step\":1,\"loss\":10.5,\"grad_norm\":1.0}\n{\"step\":2,\"loss\":9.2501,\"grad_norm\":1.0}\n");
  const CheckResult r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message,
            "step 2: loss 9.2501 in phase train vs 9.25 in baseline s/ref (phase train): |diff| 1.00e-04 (exact match "
            "required) (1 of 2 steps differ)");
}

// A trainer_state.json of transformers 5 holds full floats: losses just under a multiple of 1e-4
// (9.50126) are as far from the 4-decimal grid as those just over it, so the miss is not said to
// be the rounding's.
TEST_F(CurveEdges, AFullFloatTrainerStateMissIsNotSaidToBeRoundedWhenItsLossesLieUnderThe4DecimalGrid) {
  load(
      "  - name: ref\n"
      "  - name: hf\n"
      "    outputs: {metrics: {from: hf-trainer-state}}\n"
      "    checks: [{loss_matches: {baseline: ref, rtol: 0, atol: 1.0e-6}}]\n");
  write("ref/train/metrics.jsonl",
        "{\"step\":1,\"loss\":9.5,\"grad_norm\":1.0}\n{\"step\":2,\"loss\":8.25,\"grad_norm\":1.0}\n");
  write("hf/train/trainer_state.json",
        R"({"global_step": 2, "log_history": [{"loss": 9.50126, "step": 1}, {"loss": 8.25047, "step": 2}]})");
  const CheckResult r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(
      r.message,
      "step 1: loss 9.50126 in phase train vs 9.5 in baseline s/ref (phase train): |diff| 1.26e-03 > atol 1e-06 + "
      "rtol 0 x |9.5| = 1.00e-06 (2 of 2 steps differ)");
}

// Megatron's iteration line prints the loss to 7 significant digits of the largest loss in
// magnitude: a negative loss counts by its size, an INF step (a diverged iteration) not at all, so
// the message gives the rounding the finite values carry, not inf.
TEST_F(CurveEdges, MegatronLossRoundingIsSevenDigitsOfTheLargestFiniteMagnitude) {
  load(
      "  - name: ref\n"
      "  - name: mg\n"
      "    outputs: {metrics: {from: megatron}}\n"
      "    checks: [{loss_matches: {baseline: ref, exact: true}}]\n");
  write("ref/train/metrics.jsonl",
        "{\"step\":1,\"loss\":10.5}\n{\"step\":2,\"loss\":-20.0}\n{\"step\":3,\"loss\":8.0}\n");
  write("mg/train/rank1.log",
        megatron_line(1, "1.050001E+01") + megatron_line(2, "-2.000000E+01") + megatron_line(3, "INF"));
  const CheckResult r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message,
            "step 1: loss 10.50001 in phase train vs 10.5 in baseline s/ref (phase train): |diff| 1.00e-05 (exact "
            "match required) (2 of 3 steps differ); loss is logged rounded to 2.00e-05 (Megatron's iteration line, 7 "
            "significant digits), so a tolerance under that judges the rounding, not the run");
}

// Whether a golden is a band decides what the report draws and how the failure's table reads: a
// golden of single values has no max curve and one reference column, a band golden (every step
// a spread) both ends.
TEST_F(CurveEdges, AGoldenIsABandOnlyWhenSomeStepHasASpread) {
  load("  - name: a\n    checks: [{loss_matches: {golden: g.txt, exact: true}}]\n");
  write("a/train/metrics.jsonl", curve({10.2, 5.0}));
  write("g.txt", "1 10.0\n2 5.0\n");
  CheckResult r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.series.size(), 2u);
  const std::string header = "  step  phase train  |  golden " + dir_ + "/g.txt  |  |diff|\n";
  EXPECT_EQ(r.details, header +
                           "     1            10.2              10   2.000e-01  <-\n"
                           "     2               5               5   0.000e+00\n");
  write("g.txt", "1 9.9 10.1\n2 4.9 5.1\n");
  r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed);
  ASSERT_EQ(r.series.size(), 3u);
  EXPECT_EQ(r.series[2].role, "reference-max");
  EXPECT_EQ(r.details, header +
                           "     1            10.2  [9.9, 10.1]   1.000e-01  <-\n"
                           "     2               5  [4.9, 5.1]   0.000e+00\n");
}

// A band open at one end (`-inf 10.1`: the loss must stay under 10.1; `9 inf`: above 9) passes a
// loss inside it under a relative tolerance: the infinite end is no reference to measure it by.
TEST_F(CurveEdges, AGoldenBandOpenAtOneEndPassesALossInsideIt) {
  load("  - name: a\n    checks: [{loss_matches: {golden: g.txt, rtol: 1.0e-3}}]\n");
  write("g.txt", "1 -inf 10.1\n2 9 inf\n");
  write("a/train/metrics.jsonl", curve({10.0, 9.5}));
  const CheckResult r = run(0, "loss_matches");
  EXPECT_TRUE(r.passed) << r.message << "\n" << r.details;
}

// A NaN loss against a golden band fails with a distance of nan, measured at the band's low end:
// never "0 outside it", which would read as inside the band.
TEST_F(CurveEdges, ANanLossAgainstAGoldenBandIsNanOutsideIt) {
  load("  - name: a\n    checks: [{loss_matches: {golden: g.txt, rtol: 1.0e-3}}]\n");
  write("g.txt", "1 9.9 10.1\n2 4.9 5.1\n");
  write("a/train/metrics.jsonl", "{\"step\":1,\"loss\":null}\n{\"step\":2,\"loss\":5.0}\n");
  const CheckResult r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message, "step 1: loss nan in phase train vs band [9.9, 10.1] of golden " + dir_ +
                           "/g.txt: nan outside it > atol 0 + rtol 0.001 x |9.9| = 9.90e-03 (1 of 2 steps differ)");
}

// The relative tolerance scales with the reference's magnitude, so a negative loss (a
// log-likelihood of continuous data) matches within it as a positive one does.
TEST_F(CurveEdges, ANegativeLossMatchesWithinTheRelativeTolerance) {
  load("  - name: ref\n  - name: a\n    checks: [{loss_matches: {baseline: ref, rtol: 1.0e-3}}]\n");
  write("ref/train/metrics.jsonl", curve({-2.0, -3.0}));
  write("a/train/metrics.jsonl", curve({-2.001, -3.0}));
  const CheckResult r = run(1, "loss_matches");
  EXPECT_TRUE(r.passed) << r.message;
}

// A golden band regenerated over runs one of which diverged has an infinite end; a run whose loss
// is infinite there still fails (a non-finite loss matches only exactly), and its margin is
// infinite, not the 0 of a loss at the band's centre.
TEST_F(CurveEdges, AnInfiniteLossAtABandsInfiniteEndFailsWithAnInfiniteMargin) {
  load(
      "  - name: a\n"
      "    outputs: {metrics: {from: torchtitan-log}}\n"
      "    checks: [{loss_matches: {golden: g.txt, rtol: 1.0e-3}}]\n");
  write("g.txt", "1 9.9 10.1\n2 4.9 inf\n");
  write("a/train/rank0.log", "step: 1  loss: 10.0\nstep: 2  loss: inf\n");
  const CheckResult r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed) << r.message;
  EXPECT_EQ(r.margin, INFINITY) << r.message;
}

// A step of the reference inside the subject's span that the subject skipped fails, though the
// subject started later than the reference (a resumed run): the reference's earlier steps are
// passed over, not an end to the search.
TEST_F(CurveEdges, AResumedRunThatSkippedAStepOfItsSpanFailsNamingIt) {
  load("  - name: ref\n  - name: a\n    checks: [{loss_matches: {baseline: ref, exact: true}}]\n");
  write("ref/train/metrics.jsonl", curve({10.0, 9.0, 8.0, 7.0, 6.0}));
  write("a/train/metrics.jsonl", curve({8.0}, 3) + curve({6.0}, 5));
  const CheckResult r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message, "baseline s/ref (phase train) has loss at step 4 but phase train skipped it (it has steps 3-5)");
}

// A tolerance at the logged rounding's own step (atol 1e-4 for trainer_state.json's 4 decimals)
// is not under it: its miss is the run's, and the message does not blame the rounding.
TEST_F(CurveEdges, AMissUnderAToleranceEqualToTheRoundingDoesNotBlameTheRounding) {
  load(
      "  - name: ref\n"
      "  - name: hf\n"
      "    outputs: {metrics: {from: hf-trainer-state}}\n"
      "    checks: [{loss_matches: {baseline: ref, rtol: 0, atol: 1.0e-4}}]\n");
  write("ref/train/metrics.jsonl", kRef);
  write("hf/train/trainer_state.json",
        R"({"global_step": 2, "log_history": [{"loss": 10.5, "step": 1}, {"loss": 9.2503, "step": 2}]})");
  const CheckResult r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message,
            "step 2: loss 9.2503 in phase train vs 9.25 in baseline s/ref (phase train): |diff| 3.00e-04 > atol 0.0001 "
            "+ rtol 0 x |9.25| = 1.00e-04 (1 of 2 steps differ)");
}

// loss_decreases' margin is the drop it requires ((1 - factor) x |first loss|) over the drop seen:
// 0.5 for a loss that fell twice as far as required, a negative loss's too (its size counts).
TEST_F(CurveEdges, LossDecreasesMarginIsTheDropRequiredOverTheDropSeen) {
  load("  - name: a\n    checks: [{loss_decreases: {factor: 0.75}}]\n");
  write("a/train/metrics.jsonl", curve({10.0, 7.0, 5.0}));
  CheckResult r = run(0, "loss_decreases");
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_EQ(r.margin, 0.5);
  write("a/train/metrics.jsonl", curve({-2.0, -3.0, -4.0}));
  r = run(0, "loss_decreases");
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_EQ(r.margin, 0.25);
}

// A loss that fell exactly to its bound (10 -> 5 under factor 0.5, "expected <= 0.5 x 10 = 5")
// passes, its margin 1.
TEST_F(CurveEdges, ALossThatFellExactlyToItsBoundPasses) {
  load("  - name: a\n    checks: [{loss_decreases: {factor: 0.5}}]\n");
  write("a/train/metrics.jsonl", curve({10.0, 7.0, 5.0}));
  const CheckResult r = run(0, "loss_decreases");
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_EQ(r.margin, 1.0);
}

// A drift rule that cannot be met (more runs required than its window holds, or none required)
// is refused by name, before any history is read: not "not judged", which would hide the typo.
TEST_F(CurveEdges, ADriftRuleWhoseMinRunsIsOutsideOneToItsWindowIsRefused) {
  load("  - name: a\n    checks: [{drift: {min_runs: 3, window: 2}}]\n");
  CheckResult r = run(0, "drift");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message, "drift needs 1 <= min_runs <= window, got min_runs 3, window 2");
  load("  - name: a\n    checks: [{drift: {min_runs: 0, window: 2}}]\n");
  r = run(0, "drift");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message, "drift needs 1 <= min_runs <= window, got min_runs 0, window 2");
}

// meshtest diff reads a trainer that logs only the loss: its loss curve, and for grad_norm a
// failure naming the phase, not a curve of NaN; a trainer that logs grad_norm gives its values.
TEST_F(CurveEdges, ReadLossCurveReadsALossOnlyTrainersLossAndRefusesItsGradNorm) {
  fs::create_directories(dir_ + "/a/train");
  fs::create_directories(dir_ + "/b/train");
  write("a/train/metrics.jsonl", "{\"step\":1,\"loss\":6}\n{\"step\":2,\"loss\":5}\n");
  write("b/train/metrics.jsonl",
        "{\"step\":1,\"loss\":6,\"grad_norm\":0.5}\n{\"step\":2,\"loss\":5,\"grad_norm\":0.25}\n");
  EXPECT_EQ(read_loss_curve(dir_ + "/a/train", Outputs{}, "loss", std::nullopt),
            (std::map<long long, double>{{1, 6.0}, {2, 5.0}}));
  try {
    read_loss_curve(dir_ + "/a/train", Outputs{}, "grad_norm", std::nullopt);
    ADD_FAILURE() << "a loss-only trainer's grad_norm was read";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), dir_ + "/a/train reports no grad_norm");
  }
  EXPECT_EQ(read_loss_curve(dir_ + "/b/train", Outputs{}, "grad_norm", std::nullopt),
            (std::map<long long, double>{{1, 0.5}, {2, 0.25}}));
}

// A metric the phase never logged (validation_loss of a run that did not validate) is an error
// naming the phase and the metric: meshtest diff does not draw an empty curve as if it matched.
TEST_F(CurveEdges, ReadLossCurveRefusesAMetricThePhaseNeverLogged) {
  fs::create_directories(dir_ + "/a/train");
  write("a/train/metrics.jsonl", curve({6.0, 5.0}));
  try {
    read_loss_curve(dir_ + "/a/train", Outputs{}, "validation_loss", std::nullopt);
    ADD_FAILURE() << "a curve of no validation_loss was read";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), dir_ + "/a/train reports no validation_loss");
  }
}

// golden export --format megatron exports every step's loss, and grad_norm from the steps that
// logged one: a first step without it is passed over, not the end of the grad_norm curve, and does
// not drop that step's loss.
TEST_F(CurveEdges, PhaseCurvesKeepEveryLossAndTheGradNormOfTheStepsThatLoggedOne) {
  fs::create_directories(dir_ + "/a/train");
  write(
      "a/train/metrics.jsonl",
      "{\"step\":1,\"loss\":6}\n{\"step\":2,\"loss\":5,\"grad_norm\":0.5}\n{\"step\":3,\"loss\":4,\"grad_norm\":0.25}\n");
  const auto curves = read_phase_curves(dir_ + "/a/train", Outputs{}, std::nullopt);
  EXPECT_EQ(curves, (std::map<std::string, std::map<long long, double>>{{"loss", {{1, 6.0}, {2, 5.0}, {3, 4.0}}},
                                                                        {"grad_norm", {{2, 0.5}, {3, 0.25}}}}));
}

// The report draws the curves of the phases that ran: a first phase that did not run draws none
// (though its folder holds an earlier run's metrics), and the phase after it draws its own, with
// NaN for a step's missing grad_norm.
TEST_F(CurveEdges, RecordCurvesDrawsThePhasesThatRanAfterOneThatDidNot) {
  load("  - name: a\n    phases: [{name: warmup}, {name: train}]\n");
  outcomes_[0].phases[0].ran = false;
  write("a/warmup/metrics.jsonl", curve({9.0, 8.0}));
  write("a/train/metrics.jsonl", "{\"step\":1,\"loss\":6,\"grad_norm\":0.5}\n{\"step\":2,\"loss\":5}\n");
  record_curves(outcomes_[0]);
  EXPECT_TRUE(outcomes_[0].phases[0].curve.empty());
  const auto& drawn = outcomes_[0].phases[1].curve;
  ASSERT_EQ(drawn.size(), 2u);
  EXPECT_EQ(drawn[0].step, 1);
  EXPECT_EQ(drawn[0].loss, 6.0);
  EXPECT_EQ(drawn[0].grad_norm, 0.5);
  EXPECT_EQ(drawn[1].step, 2);
  EXPECT_EQ(drawn[1].loss, 5.0);
  EXPECT_TRUE(std::isnan(drawn[1].grad_norm));
}
