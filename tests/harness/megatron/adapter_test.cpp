// The megatron adapter (docs/foreign-trainers.md#megatron-lm-adapter-megatron): the flags it
// writes after Megatron's script for each layout, the environment, what it refuses (its own
// flags, a flag this Megatron lacks, a stop-at without the run's length), and where it reads.
#include "megatron/adapter.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/matrix.h"

namespace meshtest {
namespace {

namespace fs = std::filesystem;
using Argv = std::vector<std::string>;

// What this Megatron says it accepts: the flags the adapter writes, and a few model flags.
const char* kMegatronHelp =
    "usage: pretrain_gpt.py [-h] [--num-layers NUM_LAYERS] [--hidden-size HIDDEN_SIZE]\n"
    "  --tensor-model-parallel-size TENSOR_MODEL_PARALLEL_SIZE\n"
    "  --pipeline-model-parallel-size PIPELINE_MODEL_PARALLEL_SIZE\n"
    "  --context-parallel-size CONTEXT_PARALLEL_SIZE\n  --expert-model-parallel-size EXPERT_MODEL_PARALLEL_SIZE\n"
    "  --use-distributed-optimizer\n  --log-interval LOG_INTERVAL\n  --tensorboard-dir TENSORBOARD_DIR\n"
    "  --tensorboard-log-interval TENSORBOARD_LOG_INTERVAL\n  --log-num-zeros-in-grad\n"
    "  --ckpt-format {torch,torch_dist,torch_dcp,fsdp_dtensor}\n  --save SAVE\n  --load LOAD\n"
    "  --deterministic-mode\n  --exit-interval EXIT_INTERVAL\n  --train-iters TRAIN_ITERS\n"
    "  --no-load-optim\n  --no-load-rng\n  --mock-data\n";

int megatron_help_asked = 0;
const bool megatron_registered = [] {
  register_megatron_adapter(trainer_adapters(), [](const std::string& script) -> std::optional<std::string> {
    ++megatron_help_asked;
    if (script.find("pretrain_gpt.py") == std::string::npos) return std::nullopt;
    return std::string(kMegatronHelp);
  });
  return true;
}();

// A Megatron-LM checkout for {megatron_lm}: a folder with pretrain_gpt.py.
class MegatronAdapter : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meshtest-megatron-lm-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    std::ofstream(dir_ + "/pretrain_gpt.py") << "# stands for Megatron's entry point\n";
    ::setenv("MESHTEST_MEGATRON_LM", dir_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("MESHTEST_MEGATRON_LM");
    fs::remove_all(dir_);
  }

  static Suite load(const std::string& case_fields) {
    return load_suite_text("suite: s\ndefaults: {adapter: megatron}\ncases:\n  - name: c\n" + case_fields, "m.yaml");
  }
  static Argv argv_of(const std::string& case_fields) { return load(case_fields).cases.at(0).phases.at(0).argv; }
  static std::string error_of(const std::string& case_fields) {
    try {
      load(case_fields);
    } catch (const MatrixError& e) {
      return e.what();
    }
    return "";
  }
  // The flags after the degrees that every phase gets.
  static Argv always() {
    return {"--log-interval",
            "1",
            "--tensorboard-dir",
            "{phase_dir}/tensorboard",
            "--tensorboard-log-interval",
            "1",
            "--log-num-zeros-in-grad",
            "--ckpt-format",
            "torch_dist",
            "--save",
            "{case_dir}/checkpoint",
            "--load",
            "{case_dir}/checkpoint",
            "--deterministic-mode"};
  }
  static Argv expected(const Argv& degrees, const Argv& tail = {}) {
    Argv argv = {"{megatron_python}", "{megatron_lm}/pretrain_gpt.py"};
    argv.insert(argv.end(), degrees.begin(), degrees.end());
    const Argv a = always();
    argv.insert(argv.end(), a.begin(), a.end());
    argv.insert(argv.end(), tail.begin(), tail.end());
    return argv;
  }
  static Argv degrees(int tp, int pp, int cp, int ep) {
    return {"--tensor-model-parallel-size", std::to_string(tp), "--pipeline-model-parallel-size", std::to_string(pp),
            "--context-parallel-size",      std::to_string(cp), "--expert-model-parallel-size",   std::to_string(ep)};
  }

  std::string dir_;
};

TEST_F(MegatronAdapter, TheMeshBecomesMegatronsSizesAndDataParallelIsWhatIsLeft) {
  const Suite s = load("    mesh: {tp: 2, pp: 2}\n    options: {train-iters: 10, num-layers: 4}\n");
  EXPECT_EQ(s.cases.at(0).phases.at(0).nproc, 4);
  EXPECT_EQ(s.cases.at(0).phases.at(0).argv,
            expected(degrees(2, 2, 1, 1), {"--train-iters", "10", "--num-layers", "4"}));
  // dp_shard: the distributed optimizer; ep: data-parallel ranks that split the experts.
  EXPECT_EQ(argv_of("    mesh: {dp_shard: 2}\n"), [] {
    Argv a = expected(degrees(1, 1, 1, 1));
    a.insert(a.begin() + 10, "--use-distributed-optimizer");
    return a;
  }());
  const Suite ep = load("    mesh: {ep: 2}\n");
  EXPECT_EQ(ep.cases.at(0).phases.at(0).nproc, 2) << "{ep: 2} is 2 ranks, data parallel 2 with experts split 2 ways";
  EXPECT_EQ(ep.cases.at(0).phases.at(0).argv, expected(degrees(1, 1, 1, 2)));
  // A case without a mesh: its ranks are data parallel.
  EXPECT_EQ(load("    ngpu: 2\n").cases.at(0).phases.at(0).nproc, 2);
}

TEST_F(MegatronAdapter, StopAtIsAnExitIntervalThatKeepsTheRunsLength) {
  EXPECT_EQ(argv_of("    options: {train-iters: 10, stop-at: 5}\n"),
            expected(degrees(1, 1, 1, 1), {"--exit-interval", "5", "--train-iters", "10"}));
  const std::string e = error_of("    options: {stop-at: 5}\n");
  EXPECT_NE(e.find("stop-at 5 needs the full run's length: set train-iters in the case's options"), std::string::npos)
      << e;
}

TEST_F(MegatronAdapter, ItsOwnFlagsAndFlagsThisMegatronLacksAreRefusedWhereWritten) {
  std::string e = error_of("    options: {tensor-model-parallel-size: 2}\n");
  EXPECT_NE(e.find("option 'tensor-model-parallel-size' is set by meshtest for megatron; use the case's 'mesh (tp)'"),
            std::string::npos)
      << e;
  e = error_of("    options: {save: /tmp/elsewhere}\n");
  EXPECT_NE(e.find("option 'save' is set by meshtest for megatron"), std::string::npos) << e;
  e = error_of("    options: {num-layer: 2}\n");
  EXPECT_NE(e.find("has no flag --num-layer; did you mean --num-layers?"), std::string::npos) << e;
  e = error_of("    mesh: {dp_replicate: 2, dp_shard: 2}\n");
  EXPECT_NE(e.find("dp_replicate and dp_shard both over 1 is not supported yet"), std::string::npos) << e;
  e = error_of("    mesh: {fsdp: 2}\n");
  EXPECT_NE(e.find("unknown key 'fsdp' in mesh"), std::string::npos) << e;
  // Megatron's negative switches are flags of their own.
  EXPECT_EQ(argv_of("    options: {no-load-optim: true}\n"), expected(degrees(1, 1, 1, 1), {"--no-load-optim"}));
}

TEST_F(MegatronAdapter, EveryRankGetsMegatronsDeterminismSwitchesUnlessTheCaseSetsThem) {
  auto env_of = [](const Suite& s) {
    std::map<std::string, std::string> env;
    for (const auto& [k, v] : s.cases.at(0).phases.at(0).env) env[k] = v;
    return env;
  };
  auto env = env_of(load("    ngpu: 1\n"));
  EXPECT_EQ(env["CUDA_DEVICE_MAX_CONNECTIONS"], "1");
  EXPECT_EQ(env["CUBLAS_WORKSPACE_CONFIG"], ":4096:8");
  EXPECT_EQ(env["NCCL_ALGO"], "Ring");
  EXPECT_EQ(env["NVTE_ALLOW_NONDETERMINISTIC_ALGO"], "0");
  env = env_of(load("    env: {NCCL_ALGO: Tree}\n"));
  EXPECT_EQ(env["NCCL_ALGO"], "Tree") << "the case's env wins";
}

TEST_F(MegatronAdapter, ReadsTensorboardThenTheLastRanksLineAndTheTrackedCheckpoint) {
  const TrainerAdapter* a = trainer_adapters().find("megatron");
  ASSERT_NE(a, nullptr);
  const Outputs o = a->default_outputs(Layout{{{"tp", 2}}});
  EXPECT_EQ(o.metrics.kind, MetricsSource::kMegatron);
  EXPECT_EQ(o.metrics.path, "tensorboard");
  EXPECT_EQ(o.metrics.rank, -1) << "the last rank prints the line and writes TensorBoard";
  ASSERT_TRUE(o.checkpoint.has_value());
  EXPECT_EQ(o.checkpoint->path, "{case_dir}/checkpoint");
  EXPECT_EQ(a->steps({"python3", "pretrain_gpt.py", "--train-iters", "10", "--exit-interval", "5"}), 5.0);
  EXPECT_EQ(a->program_problem(), "");
  ::unsetenv("MESHTEST_MEGATRON_LM");
  EXPECT_NE(a->program_problem().find("set MESHTEST_MEGATRON_LM"), std::string::npos);
  const int before = megatron_help_asked;
  EXPECT_NO_THROW(load("    options: {num-layer: 2}\n")) << "without a Megatron its flags are not checked";
  EXPECT_EQ(megatron_help_asked, before);
}

}  // namespace
}  // namespace meshtest
