// What the real Megatron-LM wrote (tests/fixtures/megatron-made/README.md: d98e8a6, torch 2.11,
// an H100, examples/megatron.yaml): its TensorBoard events, its ranks' logs, a torch_dist save
// under TP 2 x PP 2 and the golden values meshtest exported, read as CPU CI reads a GPU run's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "harness/judge/checks_fixture.h"
#include "readers/checkpoint_error.h"
#include "readers/checkpoint_view.h"
#include "readers/golden_values.h"
#include "readers/log_metrics.h"
#include "readers/megatron.h"
#include "readers/tensorboard.h"
#include "test_paths.h"

namespace meshtest {
namespace {

namespace fs = std::filesystem;

const fs::path kMegatronMade = fs::path(MESHTEST_SOURCE_DIR) / "tests" / "fixtures" / "megatron-made";

MetricSeries megatron_made_tensorboard() {
  std::vector<std::string> warnings;
  return read_tensorboard_scalars((kMegatronMade / "one_gpu-tensorboard").string(), megatron_tensorboard_tags(),
                                  &warnings);
}

TEST(MegatronMade, TensorBoardHoldsEveryIterationsLossGradNormAndZeros) {
  const MetricSeries tb = megatron_made_tensorboard();
  ASSERT_EQ(tb.size(), 10u);
  EXPECT_EQ(tb.begin()->first, 1);
  EXPECT_DOUBLE_EQ(tb.at(1).at("loss"), 6.9374470710754395);  // float32, as Megatron wrote it
  EXPECT_DOUBLE_EQ(tb.at(1).at("grad_norm"), 1.2284080982208252);
  EXPECT_DOUBLE_EQ(tb.at(2).at("loss"), 6.941895484924316);
  for (const auto& [step, m] : tb) {
    EXPECT_EQ(m.count("num_zeros"), 1u) << step;
    EXPECT_EQ(m.count("learning_rate"), 1u) << step;
  }
}

// Megatron d98e8a6 prints its first iteration's line and keeps that iteration in the next line's
// sums: its line for iteration 2 says 6.939672, the mean of iterations 1 and 2. Read knowing that
// (rank 0's marker line), every iteration's loss is TensorBoard's to the line's 7 digits; read as
// printed, iteration 2 is off by 2.2e-3.
TEST(MegatronMade, TheSecondLineOfALaunchAveragesTheFirstIterationIn) {
  const MetricSeries tb = megatron_made_tensorboard();
  for (const std::string rank0 : {"one_gpu-rank0.log", "tp2_pp2-rank0.log"}) {
    const MegatronStart start = read_megatron_start((kMegatronMade / rank0).string());
    EXPECT_TRUE(start.keeps_first_iteration) << rank0;
    EXPECT_EQ(start.seq_length, 64) << rank0;  // examples/megatron.yaml's seq-length
  }
  const MegatronStart last = read_megatron_start((kMegatronMade / "tp2_pp2-rank3.log").string());
  EXPECT_FALSE(last.keeps_first_iteration) << "the last rank does not print rank 0's lines";
  EXPECT_FALSE(last.seq_length);
  EXPECT_FALSE(read_megatron_start((kMegatronMade / "no-such-rank0.log").string()).keeps_first_iteration);
  for (const std::string log : {"one_gpu-rank0.log", "tp2_pp2-rank3.log"}) {
    std::vector<std::string> warnings;
    const MetricSeries kept = read_megatron_log((kMegatronMade / log).string(), &warnings, true);
    const MetricSeries printed = read_megatron_log((kMegatronMade / log).string(), &warnings, false);
    EXPECT_TRUE(warnings.empty()) << warnings.front();
    ASSERT_EQ(kept.size(), 10u) << log;
    EXPECT_DOUBLE_EQ(printed.at(2).at("loss"), 6.939672) << log;
    EXPECT_NEAR(printed.at(2).at("loss"), (tb.at(1).at("loss") + tb.at(2).at("loss")) / 2, 1e-6) << log;
    for (const auto& [step, m] : kept) {
      // The loss printed with 7 significant digits (a second line's: twice that, less the first).
      EXPECT_NEAR(m.at("loss"), tb.at(step).at("loss"), 2e-5) << log << " iteration " << step;
      EXPECT_NEAR(m.at("grad_norm"), tb.at(step).at("grad_norm"), 5.1e-4) << log << " iteration " << step;
      if (log == "one_gpu-rank0.log")  // the same run: TP 2 x PP 2 zeroes other gradient elements
        EXPECT_EQ(m.at("num_zeros"), tb.at(step).at("num_zeros")) << log << " iteration " << step;
      EXPECT_EQ(m.at("consumed_samples"), 8.0 * step);
    }
    EXPECT_GT(std::abs(printed.at(2).at("loss") - tb.at(2).at("loss")), 2e-3) << "the quirk is real";
    EXPECT_EQ(printed.at(3).at("loss"), kept.at(3).at("loss")) << "only the launch's second line is a mean";
  }
}

// The golden values meshtest exported from that run (`golden export --format megatron`), as
// Megatron's own tooling writes them: TensorBoard's curve to 5 significant digits.
TEST(MegatronMade, ExportedGoldenValuesAreTheTensorBoardCurve) {
  const MetricSeries tb = megatron_made_tensorboard();
  const GoldenValues golden = read_golden_values((kMegatronMade / "golden_values_one_gpu.json").string());
  bool saw_loss = false;
  for (const auto& [name, metric] : golden) {
    if (name != "lm loss") continue;
    saw_loss = true;
    EXPECT_EQ(metric.start_step, 1);
    EXPECT_EQ(metric.end_step, 10);
    ASSERT_EQ(metric.values.size(), 10u);
    for (const auto& [step, value] : metric.values) EXPECT_NEAR(value, tb.at(step).at("loss"), 1e-5) << step;
  }
  EXPECT_TRUE(saw_loss);
}

// The save of iteration 5 under TP 2 x PP 2 (4 ranks, 4 files): each key one global tensor, the
// layers stacked ([4, 192, 64] from 8 chunks: 2 pipeline stages of 2 layers, 2 tensor-parallel
// halves). Every element is placed: a chunk read at the wrong offset leaves zeros, and trained
// weights drawn from a normal distribution have none.
TEST(MegatronMade, ATensorParallelPipelineSaveReadsAsWholeTensors) {
  const CheckpointView view = CheckpointView::open((kMegatronMade / "checkpoint").string(), 5);
  EXPECT_EQ(fs::path(view.step_dir()).filename(), "iter_0000005");
  EXPECT_EQ(view.format(), "pytorch-dcp");
  const CheckpointEntry* qkv = view.find("decoder.layers.self_attention.linear_qkv.weight");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->dtype, "float32");
  EXPECT_EQ(qkv->shape, (std::vector<int64_t>{4, 192, 64}));
  for (const std::string key : {"decoder.layers.self_attention.linear_qkv.weight", "embedding.word_embeddings.weight",
                                "decoder.layers.mlp.linear_fc2.weight"}) {
    const std::vector<double> values = view.read_tensor(key);
    ASSERT_FALSE(values.empty()) << key;
    size_t zeros = 0;
    double sum_squares = 0;
    for (double v : values) {
      ASSERT_TRUE(std::isfinite(v)) << key;
      zeros += v == 0;
      sum_squares += v * v;
    }
    EXPECT_EQ(zeros, 0u) << key;
    const double rms = std::sqrt(sum_squares / values.size());
    EXPECT_GT(rms, 0.005) << key;  // Megatron's init_method_std is 0.02
    EXPECT_LT(rms, 0.05) << key;
  }
  EXPECT_NE(view.find("optimizer.state.exp_avg.decoder.layers.mlp.linear_fc1.weight"), nullptr);
  // The tracker file, as Megatron left it at the end of the case, names the resumed run's save
  // (iteration 10, not kept here): opened without a step, the folder says so.
  try {
    CheckpointView::open((kMegatronMade / "checkpoint").string());
    ADD_FAILURE() << "a tracker naming a missing iteration was followed";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("no iter_0000010 folder, which latest_checkpointed_iteration.txt names "
                                         "(found: iter_0000005)"),
              std::string::npos)
        << e.what();
  }
}

// Copies of the real files, corrupted: each is refused, or its damage reported, by file name.
TEST(MegatronMade, ACorruptedCopyIsNamed) {
  char tmpl[] = "/tmp/meshtest-megatron-made-XXXXXX";
  const fs::path dir = ::mkdtemp(tmpl);
  // A shard of the TP 2 x PP 2 save cut short: the tensor whose chunk lies there names the file.
  fs::copy(kMegatronMade / "checkpoint", dir / "checkpoint", fs::copy_options::recursive);
  fs::resize_file(dir / "checkpoint" / "iter_0000005" / "__1_0.distcp", 4096);
  const CheckpointView cut = CheckpointView::open((dir / "checkpoint").string(), 5);
  std::string missing;
  for (const auto& entry : cut.entries()) {
    if (!entry.is_tensor) continue;
    try {
      cut.read_tensor(entry.key);
    } catch (const CheckpointError& e) {
      missing = e.what();
      break;
    }
  }
  EXPECT_NE(missing.find("__1_0.distcp"), std::string::npos) << "no tensor read failed: " << missing;
  // TensorBoard events with a record's bytes changed: the CRC says so, naming the file.
  fs::copy(kMegatronMade / "one_gpu-tensorboard", dir / "tb", fs::copy_options::recursive);
  const fs::path events = fs::directory_iterator(dir / "tb")->path();
  {
    std::fstream f(events, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(events) / 2));
    f.put('\x7f');
  }
  std::vector<std::string> warnings;
  std::string said;
  try {
    read_tensorboard_scalars((dir / "tb").string(), megatron_tensorboard_tags(), &warnings);
  } catch (const MetricsError& e) {
    said = e.what();
  }
  for (const auto& w : warnings) said += "\n" + w;
  EXPECT_NE(said.find(events.filename().string()), std::string::npos) << said;
  // A tracker that is not a number.
  std::ofstream(dir / "checkpoint" / "latest_checkpointed_iteration.txt") << "five";
  try {
    CheckpointView::open((dir / "checkpoint").string());
    ADD_FAILURE() << "a tracker of 'five' was followed";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("'five' is not an iteration number"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// A phase judged from the last rank's line alone (no TensorBoard): with rank 0's log beside it,
// iteration 2 is read as iteration 2 and the TP 2 x PP 2 run matches one GPU's TensorBoard at
// rtol 1e-5; without rank 0's log the mean is taken for iteration 2's loss, and the check says
// where.
TEST_F(Checks, MegatronsLineIsReadAsTheIterationsOwnLoss) {
  const std::string cases =
      "  - name: ref\n"
      "  - name: mg\n"
      "    outputs: {metrics: {from: megatron}}\n"
      "    checks: [{loss_matches: {baseline: ref, rtol: 1.0e-5}}, {loss_matches: {baseline: ref, metric: tokens_seen, "
      "exact: true}}]\n";
  std::string jsonl;  // TensorBoard's losses, and 8 sequences of 64 tokens per iteration
  for (const auto& [step, m] : megatron_made_tensorboard())
    jsonl += "{\"step\":" + std::to_string(step) + ",\"loss\":" + nlohmann::json(m.at("loss")).dump() +
             ",\"tokens_seen\":" + std::to_string(512 * step) + "}\n";
  for (bool with_rank0 : {true, false}) {
    fs::remove_all(dir_ + "/mg");
    load(cases);
    write("ref/train/metrics.jsonl", jsonl);
    fs::copy_file(kMegatronMade / "tp2_pp2-rank3.log", dir_ + "/mg/train/rank3.log");
    if (with_rank0) fs::copy_file(kMegatronMade / "tp2_pp2-rank0.log", dir_ + "/mg/train/rank0.log");
    const CheckResult r = run(1, "loss_matches");
    if (with_rank0) {
      EXPECT_TRUE(r.passed) << r.message << "\n" << r.details;
      bool tokens_judged = false;
      for (const auto& check : outcomes_[1].checks)
        if (check.kind == "loss_matches" && check.message.empty() && !check.series.empty() &&
            check.series[0].metric == "tokens_seen") {
          EXPECT_TRUE(check.passed);
          tokens_judged = true;
        }
      EXPECT_TRUE(tokens_judged) << "tokens_seen: consumed samples x seq_length from rank 0's arguments";
    } else {
      EXPECT_FALSE(r.passed);
      EXPECT_NE(r.message.find("step 2: loss 6.939672"), std::string::npos) << r.message;
      const CheckResult& tokens = outcomes_[1].checks.back();  // no sequence length known: none read
      EXPECT_FALSE(tokens.passed);
      EXPECT_NE(tokens.message.find("reports no tokens_seen"), std::string::npos) << tokens.message;
    }
  }
}

// examples/megatron.yaml's golden case on the H100 it was recorded on: the real run's TensorBoard
// passes Megatron's deterministic rule against the imported golden values; the TP 2 x PP 2 run's
// line (without rank 0's log: iteration 2 read as the printed mean) does not.
TEST_F(Checks, TheExamplesH100GoldenJudgesTheRunItCameFrom) {
  const std::string golden = std::string(MESHTEST_SOURCE_DIR) + "/examples/megatron/golden/{hardware}/one_gpu";
  ::setenv("MESHTEST_HARDWARE", "NVIDIA H100 80GB HBM3", 1);
  load(
      "  - name: mg\n"
      "    outputs: {metrics: {from: megatron}}\n"
      "    checks: [{loss_matches: {golden: \"" +
      golden +
      ".loss.txt\", rule: megatron-deterministic}}, "
      "{loss_matches: {golden: \"" +
      golden + ".num_zeros.txt\", metric: num_zeros, rule: megatron-deterministic}}]\n");
  fs::create_directories(dir_ + "/mg/train");
  fs::copy(kMegatronMade / "one_gpu-tensorboard", dir_ + "/mg/train/tensorboard");
  run(0, "loss_matches");
  int judged = 0;
  for (const auto& check : outcomes_[0].checks)
    if (check.kind == "loss_matches") {
      EXPECT_TRUE(check.passed) << check.message;
      ++judged;
    }
  EXPECT_EQ(judged, 2);
  fs::remove_all(dir_ + "/mg/train/tensorboard");
  fs::copy_file(kMegatronMade / "tp2_pp2-rank3.log", dir_ + "/mg/train/rank3.log");
  const CheckResult r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("step 2"), std::string::npos) << r.message;
  ::unsetenv("MESHTEST_HARDWARE");
}

}  // namespace
}  // namespace meshtest
