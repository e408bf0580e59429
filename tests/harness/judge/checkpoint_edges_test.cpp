// The edges of the checkpoint checks (judge/checkpoint_checks.cpp) where a slip would change a
// verdict or the message a person triages by: a rank0.json that names no checkpoint, the 4 KiB
// limit of `rename`, keys that sort before `model.`, a checkpoint with nothing to compare, and
// which element tensors_match names when several are out of bounds. Each test was shown red on the
// mutant of tools/mutate.py's full run that it kills (docs/reference-runs/mutate-full).
#include "harness/judge/checks_fixture.h"

namespace fs = std::filesystem;
using namespace meshtest;

// Without outputs.checkpoint, the checkpoint is the last step rank0.json lists, in the folder it
// names. A rank0.json that names no folder asks for outputs.checkpoint; one that lists no step says so.
TEST_F(Checks, ACheckpointFromRank0JsonNeedsItsFolderAndAStep) {
  write_checkpoint(dir_ + "/ck", {{"model.w", {{2}, {1, 2}}}});
  load("  - name: ref\n    outputs: {checkpoint: {path: '" + dir_ +
       "/ck'}}\n"
       "  - name: listed\n    checks: [{tensors_match: {baseline: ref}}]\n"
       "  - name: no_folder\n    checks: [{tensors_match: {baseline: ref}}]\n"
       "  - name: no_step\n    checks: [{tensors_match: {baseline: ref}}]\n");
  write("listed/train/rank0.json", R"({"checkpoint_folder": ")" + dir_ + R"(/ck", "checkpoint_steps_saved": [5]})");
  write("no_folder/train/rank0.json", R"({"checkpoint_steps_saved": [5]})");
  write("no_step/train/rank0.json", R"({"checkpoint_folder": ")" + dir_ + R"(/ck", "checkpoint_steps_saved": []})");
  EXPECT_TRUE(run(1, "tensors_match").passed) << run(1, "tensors_match").message;
  EXPECT_EQ(run(2, "tensors_match").message,
            "tensors_match needs outputs.checkpoint on phase train (where its checkpoint is)");
  EXPECT_EQ(run(3, "tensors_match").message, "phase train saved no checkpoint (checkpoint_steps_saved is empty)");
}

// `rename` runs libstdc++'s regex, which recurses per character: a key over 4 KiB is refused
// with its size, one of exactly 4 KiB is renamed, and without `rename` any length is read.
TEST_F(Checks, RenameRefusesAKeyOver4KiBRenamesOneOf4KiBAndNoRenameReadsAnyLength) {
  const std::string exact = "model.w" + std::string(4096 - 7, 'a');  // 4096 bytes
  const std::string renamed = exact.substr(0, exact.size() - 1) + "b";
  const std::string over = exact + "a";  // 4097 bytes
  write_checkpoint(dir_ + "/exact", {{exact, {{1}, {1}}}});
  write_checkpoint(dir_ + "/renamed", {{renamed, {{1}, {1}}}});
  write_checkpoint(dir_ + "/over", {{over, {{1}, {1}}}});
  load("  - name: renamed\n    outputs: {checkpoint: {path: '" + dir_ +
       "/renamed'}}\n"
       "  - name: exact\n    outputs: {checkpoint: {path: '" +
       dir_ +
       "/exact', rename: {'a$': 'b'}}}\n    checks: [{keys_match: {baseline: renamed}}]\n"
       "  - name: over\n    outputs: {checkpoint: {path: '" +
       dir_ +
       "/over', rename: {'a$': 'b'}}}\n    checks: [{keys_match: {baseline: renamed}}]\n"
       "  - name: over_plain\n    outputs: {checkpoint: {path: '" +
       dir_ + "/over'}}\n    checks: [{tensors_match: {baseline: over_plain}}]\n");
  EXPECT_TRUE(run(1, "keys_match").passed) << run(1, "keys_match").message;
  EXPECT_EQ(run(2, "keys_match").message,
            "phase train: a key of 4097 bytes is too long to rename: " + over.substr(0, 80) + "...");
  EXPECT_TRUE(run(3, "tensors_match").passed) << run(3, "tensors_match").message;
}

// params_match digests every model. tensor of a checkpoint, whatever sorts before model.
// (extra.step here), and a checkpoint with no model. tensor is an error, not an empty pass.
TEST_F(Checks, ParamsMatchDigestsEveryModelTensorAndRefusesACheckpointWithNone) {
  write_checkpoint(dir_ + "/ck", {{"extra.step", {{1}, {7}}}, {"model.w", {{2}, {1, 2}}}});
  write_checkpoint(dir_ + "/moved", {{"extra.step", {{1}, {7}}}, {"model.w", {{2}, {1, 3}}}});
  write_checkpoint(dir_ + "/bare", {{"extra.step", {{1}, {7}}}});
  load("  - name: ref\n    outputs: {checkpoint: {path: '" + dir_ +
       "/ck'}}\n"
       "  - name: same\n    outputs: {checkpoint: {path: '" +
       dir_ +
       "/ck'}}\n    checks: [{params_match: {baseline: ref}}]\n"
       "  - name: moved\n    outputs: {checkpoint: {path: '" +
       dir_ +
       "/moved'}}\n    checks: [{params_match: {baseline: ref}}]\n"
       "  - name: bare\n    outputs: {checkpoint: {path: '" +
       dir_ + "/bare'}}\n    checks: [{params_match: {baseline: bare}}]\n");
  EXPECT_TRUE(run(1, "params_match").passed) << run(1, "params_match").message;
  EXPECT_EQ(run(2, "params_match").message.rfind("model.w: l2 ", 0), 0u) << run(2, "params_match").message;
  EXPECT_EQ(run(3, "params_match").message,
            "phase train: its checkpoint " + dir_ +
                "/bare/step-5 holds no tensor under model. (outputs.checkpoint's model_prefix maps a trainer's own "
                "keys there)");
}

// tensors_match names the element furthest beyond its bound (|diff| - bound, not |diff| + bound),
// and of two equally far the first; with `prefix`, keys that sort before it are skipped, not an end.
TEST_F(Checks, TensorsMatchNamesTheElementFurthestBeyondItsBoundTheFirstOfATieAndSkipsOtherPrefixes) {
  // rtol 0.1: [0] is 0.5 off with a bound of 0.45 (0.05 beyond), [1] 0.3 off with 0.01 (0.29 beyond).
  write_checkpoint(dir_ + "/ref", {{"aaa.step", {{1}, {1}}}, {"model.w", {{2}, {4.5f, 0.1f}}}});
  write_checkpoint(dir_ + "/far", {{"aaa.step", {{1}, {1}}}, {"model.w", {{2}, {5.0f, 0.4f}}}});
  write_checkpoint(dir_ + "/zeros", {{"model.w", {{4}, {0, 0, 0, 0}}}});
  write_checkpoint(dir_ + "/tie", {{"model.w", {{4}, {0, 1, 1, 0}}}});
  load("  - name: ref\n    outputs: {checkpoint: {path: '" + dir_ +
       "/ref'}}\n"
       "  - name: far\n    outputs: {checkpoint: {path: '" +
       dir_ +
       "/far'}}\n    checks: [{tensors_match: {baseline: ref, rtol: 0.1, atol: 0, prefix: model.}}]\n"
       "  - name: zeros\n    outputs: {checkpoint: {path: '" +
       dir_ +
       "/zeros'}}\n"
       "  - name: tie\n    outputs: {checkpoint: {path: '" +
       dir_ + "/tie'}}\n    checks: [{tensors_match: {baseline: zeros, rtol: 0, atol: 0}}]\n");
  const auto far = run(1, "tensors_match");
  EXPECT_EQ(far.message.rfind("model.w[1]: 0.4 in phase train vs 0.1 in baseline s/ref (phase train)", 0), 0u)
      << far.message;
  EXPECT_NE(far.message.find("(2 elements in 1 of 1 tensors differ)"), std::string::npos) << far.message;
  const auto tie = run(3, "tensors_match");
  EXPECT_EQ(tie.message.rfind("model.w[1]: 1 in phase train vs 0 in baseline s/zeros", 0), 0u) << tie.message;
}

// A reference with no tensor at all says so, naming no prefix when none was given.
TEST_F(Checks, TensorsMatchOnACheckpointWithoutTensorsSaysSo) {
  write_checkpoint(dir_ + "/objects", {}, {"train_state"});
  load("  - name: ref\n    outputs: {checkpoint: {path: '" + dir_ +
       "/objects'}}\n"
       "  - name: sub\n    outputs: {checkpoint: {path: '" +
       dir_ + "/objects'}}\n    checks: [{tensors_match: {baseline: ref}}]\n");
  EXPECT_EQ(run(1, "tensors_match").message, "baseline s/ref (phase train) has no tensor keys");
}

// `meshtest diff` lists a phase's tensor keys from the checkpoint outputs.checkpoint names, and
// from its state_dict_keys.json without one.
TEST_F(Checks, ReadTensorKeysReadsTheCheckpointOutputsNameElseStateDictKeysJson) {
  write_checkpoint(dir_ + "/ck", {{"model.w", {{2}, {1, 2}}}});
  fs::create_directories(dir_ + "/phase");
  Outputs outputs;
  outputs.checkpoint = CheckpointSource{dir_ + "/ck", -1, "", {}};
  EXPECT_EQ(read_tensor_keys(dir_ + "/phase", outputs), (std::map<std::string, std::string>{{"model.w", "[2]"}}));
  write("phase/state_dict_keys.json",
        R"({"format_version":1,"keys":{"model.v":{"kind":"tensor","shape":[3]},"train_state":{"kind":"object"}}})");
  EXPECT_EQ(read_tensor_keys(dir_ + "/phase"), (std::map<std::string, std::string>{{"model.v", "[3]"}}));
  EXPECT_EQ(read_tensor_keys(dir_ + "/phase", outputs), (std::map<std::string, std::string>{{"model.w", "[2]"}}));
}
