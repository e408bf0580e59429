// The torchtitan adapter (harness/torchtitan/adapter.cpp): the command line it writes for a
// mesh, a save phase's stop-at, the flag names of the torchtitan it finds, and its errors.
// torchtitan's --help is given here as text, in tyro's form, so no Python runs.
#include <gtest/gtest.h>

#include "core/adapters.h"
#include "core/matrix.h"
#include "torchtitan/adapter.h"

using namespace meshtest;

namespace {

// What `python -m torchtitan.train --module llama3 --config llama3_debugmodel --help` lists
// (pytorch/torchtitan e51e914, cut down; tyro writes hyphens and --x.no-y for booleans).
const char* kHelp2026 = R"(usage: train.py [-h] [OPTIONS]
╭─ options ─────────────────────────────────────────────╮
│ -h, --help              show this help message and exit │
│ --dump-folder STR       (default: ./outputs)            │
╰─────────────────────────────────────────────────────────╯
│ --training.steps INT    (default: 10)                    │
│ --training.local-batch-size INT                          │
│ --lr-scheduler.warmup-steps INT                          │
│ --lr-scheduler.total-steps {None}|INT                    │
│ --parallelism.data-parallel-replicate-degree INT         │
│ --parallelism.data-parallel-shard-degree INT             │
│ --parallelism.tensor-parallel-degree INT                 │
│ --parallelism.pipeline-parallel-degree INT               │
│ --parallelism.context-parallel-degree INT                │
│ --parallelism.expert-parallel-degree INT                 │
│ --checkpoint.enable, --checkpoint.no-enable              │
│ --checkpoint.folder STR                                  │
│ --checkpoint.interval INT                                │
│ --checkpoint.last-save-model-only, --checkpoint.no-last-save-model-only │
│ --metrics.log-freq INT                                   │
│ --metrics.enable-tensorboard, --metrics.no-enable-tensorboard │
│ --validator.enable, --validator.no-enable                │
│ --validator.freq INT                                     │
│ --compile.enable, --compile.no-enable                    │
│ --debug.seed {None}|INT                                  │
│ --debug.deterministic, --debug.no-deterministic          │
)";

// The TOML era (2025): --job.dump_folder, seed and determinism under training, no total_steps.
const char* kHelp2025 = R"(usage: train.py [-h] [OPTIONS]
  --job.config-file STR
  --job.dump-folder STR
  --training.steps INT
  --training.seed INT
  --training.deterministic, --training.no-deterministic
  --parallelism.data-parallel-replicate-degree INT
  --parallelism.data-parallel-shard-degree INT
  --parallelism.tensor-parallel-degree INT
  --parallelism.pipeline-parallel-degree INT
  --parallelism.context-parallel-degree INT
  --checkpoint.enable-checkpoint, --checkpoint.no-enable-checkpoint
  --checkpoint.folder STR
  --checkpoint.last-save-model-only, --checkpoint.no-last-save-model-only
  --metrics.log-freq INT
)";

// Which help the fake torchtitan prints, by --config: "old_*" configs are the 2025 one,
// "gone_*" cannot be asked.
const bool registered = [] {
  register_torchtitan_adapter(trainer_adapters(), [](const std::string&, const std::string& config) {
    if (config.rfind("gone_", 0) == 0) return std::optional<std::string>();
    return std::optional<std::string>(config.rfind("old_", 0) == 0 ? kHelp2025 : kHelp2026);
  });
  return true;
}();

std::string errors_of(const std::string& yaml) {
  try {
    load_suite_text(yaml, "m.yaml");
  } catch (const MatrixError& e) {
    std::string all;
    for (const auto& line : e.errors()) all += line + "\n";
    return all;
  }
  return "";
}

std::vector<std::string> argv_of(const std::string& cases, size_t phase = 0) {
  const Suite s = load_suite_text(
      "suite: s\ndefaults: {adapter: torchtitan, model: llama3/llama3_debugmodel}\n"
      "cases:\n" +
          cases,
      "m.yaml");
  return s.cases.at(0).phases.at(phase).argv;
}

using Argv = std::vector<std::string>;

Argv titan(const std::string& degrees_and_rest) {
  Argv argv = {"{torchtitan_python}", "-m", "torchtitan.train", "--module", "llama3", "--config", "llama3_debugmodel"};
  std::string word;
  for (char c : degrees_and_rest + " ") {
    if (c != ' ') {
      word += c;
    } else if (!word.empty()) {
      argv.push_back(word);
      word.clear();
    }
  }
  return argv;
}

const std::string kDefaults =
    " --dump_folder {phase_dir} --checkpoint.folder {case_dir}/checkpoint --debug.seed 42 --debug.deterministic"
    " --metrics.log_freq 1";

}  // namespace

TEST(TorchtitanAdapter, AMeshBecomesTorchtitansParallelismDegrees) {
  EXPECT_EQ(argv_of("  - {name: fsdp, mesh: {dp_shard: 4}}\n"),
            titan("--parallelism.data_parallel_replicate_degree 1 --parallelism.data_parallel_shard_degree 4 "
                  "--parallelism.tensor_parallel_degree 1 --parallelism.pipeline_parallel_degree 1 "
                  "--parallelism.context_parallel_degree 1" +
                  kDefaults));
  EXPECT_EQ(
      argv_of("  - {name: hsdp+tp, mesh: {dp_replicate: 2, dp_shard: 2, tp: 2}, options: {training.steps: 10}}\n"),
      titan("--parallelism.data_parallel_replicate_degree 2 --parallelism.data_parallel_shard_degree 2 "
            "--parallelism.tensor_parallel_degree 2 --parallelism.pipeline_parallel_degree 1 "
            "--parallelism.context_parallel_degree 1" +
            kDefaults + " --training.steps 10"));
  EXPECT_EQ(argv_of("  - {name: pp+cp, mesh: {pp: 2, cp: 2}}\n"),
            titan("--parallelism.data_parallel_replicate_degree 1 --parallelism.data_parallel_shard_degree 1 "
                  "--parallelism.tensor_parallel_degree 1 --parallelism.pipeline_parallel_degree 2 "
                  "--parallelism.context_parallel_degree 2" +
                  kDefaults));
  // Without a mesh, every rank shards (FSDP), as torchtitan's dp_shard -1 would.
  EXPECT_EQ(argv_of("  - {name: n, ngpu: 2}\n")[10], "2");
}

TEST(TorchtitanAdapter, TheLossIsReadFromTheFirstRankOfTheLastPipelineStage) {
  const Suite s = load_suite_text(
      "suite: s\ndefaults: {adapter: torchtitan, model: llama3/llama3_debugmodel}\n"
      "cases:\n  - {name: a, mesh: {dp_shard: 2, tp: 2}}\n  - {name: b, mesh: {pp: 2, dp_shard: 2, tp: 2}}\n",
      "m.yaml");
  const Outputs& flat = s.cases[0].phases[0].outputs;
  EXPECT_EQ(flat.metrics.kind, MetricsSource::kTorchtitanLog);
  EXPECT_EQ(flat.metrics.rank, 0);
  ASSERT_TRUE(flat.checkpoint);
  EXPECT_EQ(flat.checkpoint->path, "{case_dir}/checkpoint");
  EXPECT_EQ(flat.checkpoint->model_prefix, "model.");
  EXPECT_EQ(s.cases[1].phases[0].outputs.metrics.rank, 4);  // stage 1 of 2, 4 ranks each
}

// finding 4: torchtitan builds its LR schedule from training.steps, so a save phase cut to 5 of
// 10 steps must keep the 10-step schedule, and its last save must hold the optimizer.
TEST(TorchtitanAdapter, StopAtCutsTheStepsAndKeepsTheScheduleAndTheOptimizer) {
  const Argv argv = argv_of(R"(  - name: save[dp_shard=2]-load[tp=2]
    options: {training.steps: 10, checkpoint.enable: true}
    phases:
      - {name: save, mesh: {dp_shard: 2}, options: {stop-at: 5}}
      - {name: load, mesh: {tp: 2}}
)");
  EXPECT_EQ(Argv(argv.end() - 6, argv.end()),
            (Argv{"--checkpoint.enable", "--training.steps", "5", "--lr_scheduler.total_steps", "10",
                  "--checkpoint.no_last_save_model_only"}))
      << ::testing::PrintToString(argv);
  EXPECT_EQ(std::count(argv.begin(), argv.end(), "--training.steps"), 1);  // 10 is not passed as well
  const Argv load = argv_of(R"(  - name: c
    options: {training.steps: 10}
    phases:
      - {name: save, options: {stop-at: 5}}
      - {name: load}
)",
                            1);
  EXPECT_EQ(Argv(load.end() - 2, load.end()), (Argv{"--training.steps", "10"}));
  const std::string e = errors_of(
      "suite: s\ndefaults: {adapter: torchtitan, model: llama3/llama3_debugmodel}\ncases:\n"
      "  - {name: c, options: {stop-at: 5}}\n");
  EXPECT_NE(e.find("m.yaml:4:5: stop-at 5 needs the full run's length: set training.steps"), std::string::npos) << e;
}

TEST(TorchtitanAdapter, FlagNamesFollowTheTorchtitanThatRuns) {
  const Argv old = argv_of("  - {name: a, model: llama3/old_debugmodel, mesh: {dp_shard: 2}}\n");
  for (const char* flag : {"--job.dump_folder", "--training.seed", "--training.deterministic"})
    EXPECT_NE(std::find(old.begin(), old.end(), flag), old.end()) << flag << " in " << ::testing::PrintToString(old);
  // A flag the adapter needs and that torchtitan lacks is named, at load time.
  const std::string e = errors_of(
      "suite: s\ndefaults: {adapter: torchtitan, model: llama3/old_debugmodel}\ncases:\n"
      "  - {name: c, options: {training.steps: 10}, phases: [{name: save, options: {stop-at: 5}}]}\n");
  EXPECT_NE(e.find("torchtitan (--module llama3 --config old_debugmodel) has no flag for the LR schedule length "
                   "(looked for --lr_scheduler.total_steps)"),
            std::string::npos)
      << e;
  // When torchtitan cannot be asked, the newest names are written and nothing is refused.
  const Argv unknown = argv_of("  - {name: a, model: llama3/gone_debugmodel, options: {anything.at_all: 1}}\n");
  EXPECT_NE(std::find(unknown.begin(), unknown.end(), "--dump_folder"), unknown.end());
  EXPECT_EQ(unknown.back(), "1");
}

TEST(TorchtitanAdapter, OptionsAreCheckedAgainstTorchtitansFlags) {
  const std::string typo = errors_of(
      "suite: s\ndefaults: {adapter: torchtitan, model: llama3/llama3_debugmodel}\ncases:\n"
      "  - {name: c, options: {metrics.enable_tensorbord: true}}\n");
  EXPECT_NE(typo.find("torchtitan (llama3/llama3_debugmodel) has no flag --metrics.enable_tensorbord; did you mean "
                      "--metrics.enable_tensorboard?"),
            std::string::npos)
      << typo;
  // Either spelling of a flag is torchtitan's; false is tyro's --x.no_y.
  const Argv argv = argv_of("  - {name: c, options: {metrics.enable-tensorboard: true, compile.enable: false}}\n");
  EXPECT_EQ(Argv(argv.end() - 2, argv.end()), (Argv{"--metrics.enable-tensorboard", "--compile.no_enable"}));
  // The degrees come from the mesh, the module and config from the model.
  const std::string reserved = errors_of(
      "suite: s\ndefaults: {adapter: torchtitan, model: llama3/llama3_debugmodel}\ncases:\n"
      "  - {name: c, options: {parallelism.tensor_parallel_degree: 2}}\n");
  EXPECT_NE(reserved.find("option 'parallelism.tensor_parallel_degree' is set by meshtest for torchtitan; use the "
                          "case's 'mesh' key"),
            std::string::npos)
      << reserved;
  const std::string model = errors_of("suite: s\ncases:\n  - {name: c, adapter: torchtitan, model: llama3}\n");
  EXPECT_NE(model.find("torchtitan model 'llama3' is not MODULE/CONFIG"), std::string::npos) << model;
  // An option set by the case replaces the adapter's default instead of doubling it.
  const Argv own = argv_of("  - {name: c, options: {dump_folder: \"{case_dir}\", debug.seed: 7}}\n");
  EXPECT_EQ(std::count(own.begin(), own.end(), "--dump_folder"), 1);
  EXPECT_EQ(Argv(own.end() - 4, own.end()), (Argv{"--dump_folder", "{case_dir}", "--debug.seed", "7"}));
}

TEST(TorchtitanAdapter, SaysHowToAskForAValidationLoss) {
  const TrainerAdapter* titan = trainer_adapters().find("torchtitan");
  ASSERT_NE(titan, nullptr);
  EXPECT_EQ(titan->how_to_report("validation_loss"), "--validator.enable --validator.freq N");
  EXPECT_EQ(titan->steps({"python3", "--training.steps", "30"}), 30.0);
  EXPECT_FALSE(titan->steps({"python3"}).has_value());  // the config's own default: unknown here
}

// outputs.checkpoint merges key by key over the adapter's (issue 47's false red): `step` alone
// keeps the folder and torchtitan's model prefix, so keys_match sees `model.`-prefixed keys on
// both sides. Without an adapter default, a path is still required.
TEST(TorchtitanAdapter, AnOutputsOverrideOfOneKeyKeepsTheAdaptersOthers) {
  const Suite s = load_suite_text(
      "suite: s\ndefaults: {adapter: torchtitan, model: llama3/llama3_debugmodel}\ncases:\n"
      "  - {name: a, outputs: {checkpoint: {step: 5}}}\n"
      "  - {name: b}\n",
      "m.yaml");
  const auto& a = s.cases.at(0).phases.at(0).outputs.checkpoint;
  const auto& b = s.cases.at(1).phases.at(0).outputs.checkpoint;
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->step, 5);
  EXPECT_EQ(a->path, b->path);
  EXPECT_EQ(a->model_prefix, "model.");
  EXPECT_EQ(b->step, -1);
  const std::string e = errors_of("suite: s\ncases:\n  - {name: c, command: [x], outputs: {checkpoint: {step: 5}}}\n");
  EXPECT_NE(e.find("m.yaml:3:"), std::string::npos) << e;
  EXPECT_NE(e.find("outputs.checkpoint needs a path"), std::string::npos) << e;
  EXPECT_NE(e.find("adapter 'command' names no checkpoint of its own"), std::string::npos) << e;
}

// `meshtest show` says where each output setting comes from: the matrix, or the adapter.
TEST(TorchtitanAdapter, ShowSaysWhereEachOutputSettingComesFrom) {
  const Suite s = load_suite_text(
      "suite: s\ndefaults: {adapter: torchtitan, model: llama3/llama3_debugmodel}\ncases:\n"
      "  - {name: a, outputs: {checkpoint: {step: 5}}}\n",
      "m.yaml");
  const auto from = s.cases.at(0).to_json()["phases"][0]["outputs_from"];
  EXPECT_EQ(from.value("checkpoint.step", ""), "m.yaml:4:44") << from.dump();
  EXPECT_EQ(from.value("checkpoint.path", ""), "adapter torchtitan") << from.dump();
  EXPECT_EQ(from.value("checkpoint.model_prefix", ""), "adapter torchtitan") << from.dump();
  EXPECT_EQ(from.value("metrics", ""), "adapter torchtitan") << from.dump();
}

// A check whose input the case cannot supply is refused at load, where it is written, with what
// would make it work; the checks torchtitan can feed load as before, and a command trainer may
// write the contract files, so its params_match stands.
TEST(TorchtitanAdapter, AChecksInputTheTrainerCannotSupplyIsRefusedAtLoad) {
  const std::string head =
      "suite: s\ndefaults: {adapter: torchtitan, model: llama3/llama3_debugmodel}\ncases:\n"
      "  - {name: base}\n";
  const std::string e = errors_of(head + "  - {name: c, checks: [replicas_equal]}\n");
  EXPECT_NE(e.find("m.yaml:5:"), std::string::npos) << e;
  EXPECT_NE(e.find("check replicas_equal cannot judge s/c: it reads meshtest's contract files "
                   "(rank<R>.json, param_digest.json; docs/contracts.md), which adapter 'torchtitan' does not write "
                   "(a checkpoint keeps one copy of a replicated tensor, so replicas cannot be compared from it); "
                   "params_match and tensors_match compare its checkpoints instead"),
            std::string::npos)
      << e;
  // saved_once reads the chunks of the checkpoint outputs.checkpoint names (judge/checkpoint_checks.cpp).
  EXPECT_NO_THROW(load_suite_text(head + "  - {name: c, checks: [saved_once]}\n", "m.yaml"));
  const std::string tokens = errors_of(head + "  - {name: c, checks: [{tokens_match: {baseline: base}}]}\n");
  EXPECT_NE(tokens.find("it reads generated tokens, which adapter 'torchtitan' does not write: name a JSON file with "
                        "generated_ids in outputs.tokens"),
            std::string::npos)
      << tokens;
  // params_match reads the checkpoint where no param_digest.json is (judge/rank_checks.cpp).
  EXPECT_NO_THROW(
      load_suite_text(head + "  - {name: c, checks: [{keys_match: {baseline: base}}, {params_match: {baseline: base}}, "
                             "{tensors_match: {baseline: base}}, {loss_matches: {baseline: base}}]}\n"
                             "  - {name: d, outputs: {tokens: gen.json}}\n"
                             "  - {name: e, outputs: {tokens: gen.json}, checks: [{tokens_match: {baseline: d}}]}\n",
                      "m.yaml"));
  // The baseline must supply it too (checked across the loaded suites).
  const Suite with_baseline = load_suite_text(
      head + "  - {name: d, outputs: {tokens: gen.json}, checks: [{tokens_match: {baseline: base}}]}\n", "m.yaml");
  std::string baseline;
  try {
    validate_suites({with_baseline});
  } catch (const MatrixError& e) {
    for (const auto& line : e.errors()) baseline += line + "\n";
  }
  EXPECT_NE(baseline.find("m.yaml:5:"), std::string::npos) << baseline;
  EXPECT_NE(baseline.find("check tokens_match cannot read its baseline s/base: it reads generated tokens"),
            std::string::npos)
      << baseline;
  EXPECT_NO_THROW(
      load_suite_text("suite: s\ncases:\n  - {name: a, command: [x]}\n"
                      "  - {name: b, command: [x], checks: [{params_match: {baseline: a}}, replicas_equal]}\n",
                      "m.yaml"));
}
