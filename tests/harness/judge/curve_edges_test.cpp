// The edges of reading a curve (judge/curve_checks.cpp) where a slip would change a verdict or the
// message a person triages by: a blank line inside metrics.jsonl and a file with no step, which of
// a Megatron phase's files is its last rank's log (and rank 0 when the matrix names it), Megatron's
// TensorBoard folder without `lm loss`, the TensorBoard tags listed when no loss was found, a step
// with no loss (the Trainer's eval_on_start), the ten warnings a failure shows, and a Hugging Face
// Trainer phase resumed from a checkpoint. Each test was shown red on the mutant of
// tools/mutate.py that it kills.
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
