// What Megatron-LM writes (readers/megatron.h): its iteration and validation lines, and its
// checkpoint folders (the tracker file, iter_NNNNNNN/, the torch_dist format and the formats
// meshtest refuses by name).
#include "readers/megatron.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "readers/checkpoint_view.h"
#include "readers/log_metrics.h"
#include "test_paths.h"

namespace meshtest {
namespace {

namespace fs = std::filesystem;
using Warnings = std::vector<std::string>;

MetricSeries megatron(const std::string& text, Warnings* warnings = nullptr) {
  std::istringstream in(text);
  return parse_megatron_log(in, "rank3.log", warnings);
}

bool megatron_warned(const Warnings& warnings, const std::string& part) {
  for (const auto& w : warnings)
    if (w.find(part) != std::string::npos) return true;
  return false;
}

// Lines as Megatron-LM's training_log prints them: without a timestamp (as quoted in
// epfLLM/Megatron-LLM issue 11), and with today's `[YYYY-mm-dd HH:MM:SS.ffffff]` and num zeros.
const char* kLines =
    " iteration      122/  250000 | consumed samples:       124928 | elapsed time per iteration (ms): 86545.2 | "
    "learning rate: 9.150E-06 | global batch size:  1024 | lm loss: 2.504220E+00 | loss scale: 1.0 | grad norm: "
    "0.231 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    " [2026-08-22 15:22:22.123456] iteration      123/     250 | consumed samples:          984 | elapsed time per "
    "iteration (ms): 61.3 | learning rate: 1.500000E-04 | global batch size:     8 | lm loss: 1.092704E+01 | loss "
    "scale: 1.0 | grad norm: 5.123 | num zeros: 1785 | number of skipped iterations:   0 | number of nan "
    "iterations:   0 |\n";

TEST(MegatronLog, ReadsTheIterationLineWithAndWithoutItsTimestamp) {
  Warnings warnings;
  const MetricSeries s = megatron(kLines, &warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_DOUBLE_EQ(s.at(122).at("loss"), 2.504220);
  EXPECT_DOUBLE_EQ(s.at(122).at("grad_norm"), 0.231);
  EXPECT_DOUBLE_EQ(s.at(122).at("consumed_samples"), 124928);
  EXPECT_DOUBLE_EQ(s.at(122).at("learning_rate"), 9.150e-06);
  EXPECT_DOUBLE_EQ(s.at(122).at("iteration_time_ms"), 86545.2);
  EXPECT_EQ(s.at(122).count("num_zeros"), 0u) << "this run did not log num zeros";
  EXPECT_DOUBLE_EQ(s.at(123).at("loss"), 10.92704);
  EXPECT_DOUBLE_EQ(s.at(123).at("num_zeros"), 1785);
  EXPECT_DOUBLE_EQ(s.at(123).at("skipped_iterations"), 0);
}

TEST(MegatronLog, ValidationLinesGoUnderTheirIterationAsValidationLoss) {
  const MetricSeries s =
      megatron(std::string(kLines) +
               " validation loss at iteration 123 | lm loss value: 1.050000E+01 | lm loss PPL: "
               "3.631550E+04 | \n"
               " validation loss at iteration 123 on validation set | mtp_1 loss value: 9.5E+00 |\n");
  EXPECT_DOUBLE_EQ(s.at(123).at("loss"), 10.92704) << "the training loss stays";
  EXPECT_DOUBLE_EQ(s.at(123).at("validation_loss"), 10.5);
  EXPECT_DOUBLE_EQ(s.at(123).at("validation_loss_ppl"), 36315.5);
  EXPECT_DOUBLE_EQ(s.at(123).at("validation_mtp_1_loss"), 9.5);
}

TEST(MegatronLog, ColoursRankPrefixesNanAndTheLaterLineOfAStep) {
  Warnings warnings;
  const MetricSeries s = megatron(
      "[rank3]: \x1b[32m iteration        1/      10 | lm loss: 1.100000E+01 | grad norm: nan |\x1b[0m\n"
      " iteration        1/      10 | lm loss: 1.050000E+01 | grad norm: 2.000 |\n"
      " iteration        2/      10 | lm loss: inf | grad norm: 3.5 |\n",
      &warnings);
  EXPECT_DOUBLE_EQ(s.at(1).at("loss"), 10.5) << "the later line of a step wins";
  EXPECT_TRUE(megatron_warned(warnings, "rank3.log:2: step 1 logged again (before at line 1)"));
  EXPECT_TRUE(std::isinf(s.at(2).at("loss")));
}

TEST(MegatronLog, OtherLinesAndUnreadableFieldsAreNotSteps) {
  Warnings warnings;
  const MetricSeries s = megatron(
      "building GPT model ...\n"
      " > number of parameters on (tensor, pipeline) model parallel rank (0, 0): 1234\n"
      " iteration: 5 | lm loss: 1.0 |\n"                 // not Megatron's shape
      " iteration        x/      10 | lm loss: 1.0 |\n"  // no number
      " iteration        3/      10 | lm loss: abc | grad norm: 1.5 | odd field |\n",
      &warnings);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s.at(3).count("loss"), 0u);
  EXPECT_DOUBLE_EQ(s.at(3).at("grad_norm"), 1.5);
  EXPECT_TRUE(megatron_warned(warnings, "rank3.log:5: iteration 3: lm loss 'abc' is not a number, left out"));
  EXPECT_TRUE(megatron_warned(warnings, "'odd field' is not a `key: value` field"));
}

TEST(MegatronLog, HostileInputNeverCrashes) {
  std::mt19937 rng(61);
  const std::string pieces[] = {" iteration ",
                                "/",
                                "|",
                                ": ",
                                "lm loss",
                                "1.5E+00",
                                "\x1b[",
                                "[",
                                "]",
                                "\n",
                                " validation loss at iteration ",
                                "value",
                                "\r",
                                "99999999999999999999"};
  for (int round = 0; round < 500; ++round) {
    std::string text;
    for (int i = 0; i < 40; ++i) text += pieces[rng() % std::size(pieces)];
    Warnings warnings;
    EXPECT_NO_THROW(megatron(text, &warnings));
  }
  EXPECT_THROW(read_megatron_log("/nonexistent/rank0.log", nullptr), MetricsError);
}

// ---- checkpoint folders ----------------------------------------------------------------

class MegatronCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meshtest-megatron-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // iter_<n> as torch_dist writes it: a real DCP shard set and Megatron's metadata.json.
  fs::path save(long long n) {
    char name[32];
    std::snprintf(name, sizeof(name), "iter_%07lld", n);
    const fs::path at = fs::path(dir_) / name;
    fs::copy(std::string(MESHTEST_SOURCE_DIR) + "/tests/fixtures/dcp-made/mesh-2x2/step-3", at,
             fs::copy_options::recursive);
    std::ofstream(at / "metadata.json")
        << R"({"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch", "common_backend_version": 1})";
    return at;
  }
  void track(const std::string& text) { std::ofstream(fs::path(dir_) / "latest_checkpointed_iteration.txt") << text; }
  std::string error_of(const std::string& path, long long step = -1) {
    try {
      CheckpointView::open(path, step);
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "(opened)";
  }

  std::string dir_;
};

TEST_F(MegatronCheckpoint, TheTrackerFileNamesTheIterationRead) {
  save(2);
  const fs::path four = save(4);
  track("2\n");
  EXPECT_EQ(fs::path(CheckpointView::open(dir_).step_dir()).filename(), "iter_0000002")
      << "the tracker, not the newest folder: a save of 4 that never finished its tracker is not the newest save";
  track("4");
  const CheckpointView newest = CheckpointView::open(dir_);
  EXPECT_EQ(fs::path(newest.step_dir()).filename(), "iter_0000004");
  EXPECT_EQ(newest.format(), "pytorch-dcp");
  EXPECT_FALSE(newest.entries().empty());
  EXPECT_EQ(fs::path(CheckpointView::open(dir_, 2).step_dir()).filename(), "iter_0000002") << "a step asked for";
  EXPECT_EQ(CheckpointView::open(four.string()).step_dir(), four.string()) << "an iter folder itself";
  EXPECT_NE(error_of(four.string(), 2).find("is iter_0000004, but step 2 was asked for"), std::string::npos);
}

TEST_F(MegatronCheckpoint, AMissingOrBadTrackerIsNamed) {
  save(4);
  EXPECT_NE(error_of(dir_).find(": no latest_checkpointed_iteration.txt, which Megatron writes once a save is "
                                "finished (found: iter_0000004)"),
            std::string::npos)
      << error_of(dir_);
  track("6");
  EXPECT_NE(error_of(dir_).find(": no iter_0000006 folder, which latest_checkpointed_iteration.txt names (found: "
                                "iter_0000004)"),
            std::string::npos)
      << error_of(dir_);
  track("four");
  EXPECT_NE(error_of(dir_).find("latest_checkpointed_iteration.txt: 'four' is not an iteration number"),
            std::string::npos);
  track("4x");  // a number with more after it is no number, though iter_0000004 exists
  EXPECT_NE(error_of(dir_).find("latest_checkpointed_iteration.txt: '4x' is not an iteration number"),
            std::string::npos);
  track("release");
  EXPECT_NE(error_of(dir_).find("names a `release` checkpoint"), std::string::npos);
  EXPECT_NE(error_of(dir_, 5).find("no iter_0000005 folder (found: iter_0000004)"), std::string::npos);
  EXPECT_NE(error_of(dir_, 0).find("no iter_0000000 folder (found: iter_0000004)"), std::string::npos)
      << "step 0, asked for, is not the tracker's: " << error_of(dir_, 0);
}

TEST_F(MegatronCheckpoint, OtherFormatsAreRefusedByName) {
  const fs::path at = save(4);
  track("4");
  // `torch`: a pickle per model-parallel rank.
  fs::create_directories(at / "mp_rank_00");
  EXPECT_NE(error_of(dir_).find("iter_0000004: a Megatron checkpoint in the `torch` format"), std::string::npos)
      << error_of(dir_);
  fs::remove_all(at / "mp_rank_00");
  // `torch_dcp` / `fsdp_dtensor`: DCP without metadata.json.
  fs::remove(at / "metadata.json");
  EXPECT_NE(error_of(dir_).find("PyTorch DCP without Megatron's metadata.json: a `torch_dcp` or `fsdp_dtensor`"),
            std::string::npos)
      << error_of(dir_);
  // Another sharded backend, and a metadata.json that is not JSON.
  std::ofstream(at / "metadata.json") << R"({"sharded_backend": "zarr"})";
  EXPECT_NE(error_of(dir_).find("metadata.json: sharded_backend is 'zarr'"), std::string::npos) << error_of(dir_);
  std::ofstream(at / "metadata.json") << "{not json";
  EXPECT_NE(error_of(dir_).find("metadata.json: not JSON"), std::string::npos);
  // An unfinished save: metadata.json without the DCP .metadata.
  std::ofstream(at / "metadata.json") << R"({"sharded_backend": "torch_dist"})";
  fs::remove(at / ".metadata");
  EXPECT_NE(error_of(dir_).find("there is no .metadata (an unfinished save?)"), std::string::npos) << error_of(dir_);
}

TEST_F(MegatronCheckpoint, AFolderOfAnotherTrainerIsNotMegatrons) {
  // A meshtrain/torchtitan step-<N> folder reads as before.
  fs::copy(std::string(MESHTEST_SOURCE_DIR) + "/tests/fixtures/dcp-made/mesh-2x2", dir_,
           fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  EXPECT_EQ(fs::path(CheckpointView::open(dir_).step_dir()).filename(), "step-3");
}

}  // namespace
}  // namespace meshtest
