// The hf-trainer adapter (docs/foreign-trainers.md#the-hugging-face-trainer-adapter-hf-trainer):
// the flags it writes after the user's script for each layout, what it refuses, and where it
// reads the numbers.
#include "hf_trainer/adapter.h"

#include <gtest/gtest.h>

#include "core/matrix.h"

namespace meshtest {
namespace {

const bool registered = [] {
  register_hf_trainer_adapter(trainer_adapters());
  return true;
}();

using Argv = std::vector<std::string>;

Argv argv_of(const std::string& case_fields) {
  const Suite s = load_suite_text(
      "suite: s\ndefaults: {adapter: hf-trainer, command: [python3, train.py]}\ncases:\n  - name: c\n" + case_fields,
      "m.yaml");
  return s.cases.at(0).phases.at(0).argv;
}

std::string error_of(const std::string& case_fields) {
  try {
    argv_of(case_fields);
  } catch (const MatrixError& e) {
    return e.what();
  }
  return "";
}

const Argv kAlways = {"python3", "train.py",           "--output_dir", "{phase_dir}", "--logging_steps",
                      "1",       "--full_determinism", "--report_to",  "none"};

Argv with(Argv tail) {
  Argv argv = kAlways;
  argv.insert(argv.end(), tail.begin(), tail.end());
  return argv;
}

TEST(HfTrainerAdapter, WritesTheFlagsThatMakeARunJudgeableAndItsLayoutReal) {
  // One rank, or DDP over N (the Trainer's default): no FSDP flags; seed 42 unless given.
  EXPECT_EQ(argv_of("    ngpu: 1\n    options: {max_steps: 4}\n"), with({"--seed", "42", "--max_steps", "4"}));
  EXPECT_EQ(argv_of("    mesh: {dp_replicate: 2}\n    options: {seed: 7}\n"), with({"--seed", "7"}));
  // FSDP 2 over dp_shard ranks; save_steps brings save_strategy steps.
  EXPECT_EQ(argv_of("    mesh: {dp_shard: 4}\n    options: {save_steps: 2}\n"),
            with({"--seed", "42", "--save_strategy", "steps", "--fsdp", "full_shard auto_wrap", "--fsdp_config",
                  R"({"fsdp_version": 2, "reshard_after_forward": true, "state_dict_type": "SHARDED_STATE_DICT"})",
                  "--save_steps", "2"}));
  // dp_shard: 1 is FSDP over one rank (how the Trainer loads a DCP checkpoint at one rank);
  // beside replicas it is DDP.
  const Argv fsdp = {"--seed",
                     "42",
                     "--fsdp",
                     "full_shard auto_wrap",
                     "--fsdp_config",
                     R"({"fsdp_version": 2, "reshard_after_forward": true, "state_dict_type": "SHARDED_STATE_DICT"})"};
  EXPECT_EQ(argv_of("    mesh: {dp_shard: 1}\n"), with(fsdp));
  EXPECT_EQ(argv_of("    mesh: {dp_replicate: 2, dp_shard: 1}\n"), with({"--seed", "42"}));
}

TEST(HfTrainerAdapter, RefusesWhatItCannotRunWhereTheMatrixSaysIt) {
  EXPECT_NE(error_of("    mesh: {tp: 2}\n").find("m.yaml:5:12: unknown key 'tp' in mesh"), std::string::npos)
      << error_of("    mesh: {tp: 2}\n");
  EXPECT_NE(error_of("    mesh: {dp_replicate: 2, dp_shard: 2}\n").find("HSDP"), std::string::npos);
  const std::string own = error_of("    options: {output_dir: /tmp/x}\n");
  EXPECT_NE(own.find("output_dir"), std::string::npos) << own;
  EXPECT_NE(own.find("{phase_dir}"), std::string::npos) << own;
}

TEST(HfTrainerAdapter, ReadsTheCurvesFromTrainerStateAndTheNewestCheckpoint) {
  const TrainerAdapter* a = trainer_adapters().find("hf-trainer");
  ASSERT_NE(a, nullptr);
  const Outputs o = a->default_outputs(Layout{{{"dp_shard", 2}}});
  EXPECT_EQ(o.metrics.kind, MetricsSource::kHfTrainerState);
  ASSERT_TRUE(o.checkpoint.has_value());
  EXPECT_EQ(o.checkpoint->path, ".");
  EXPECT_FALSE(o.contract_files);
  // A checkpoint saved under FSDP (Accelerate's {"model": state_dict}) reads as the model's own keys.
  EXPECT_EQ(o.checkpoint->rename.size(), 1u);
  EXPECT_EQ(a->default_outputs(Layout{{{"dp_shard", 1}}}).checkpoint->rename.size(), 1u);
  EXPECT_TRUE(a->default_outputs(Layout{{{"dp_replicate", 2}}}).checkpoint->rename.empty());
  EXPECT_EQ(a->steps({"python3", "train.py", "--max_steps", "12"}), 12.0);
}

}  // namespace
}  // namespace meshtest
