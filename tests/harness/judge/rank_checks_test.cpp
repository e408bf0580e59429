// The checks of the files ranks leave (judge/rank_checks.cpp): generated tokens, the
// pieces in rank<R>.json, param_digest.json, and the checkpoint bytes each rank wrote.
#include "harness/judge/checks_fixture.h"

namespace fs = std::filesystem;
using namespace meshtest;

TEST_F(Checks, TokensMatchNamesThePosition) {
  load("  - name: a\n    phases: [{name: dp}, {name: tp}]\n    checks: [{tokens_match: {phase: tp, against: dp}}]\n");
  write("a/dp/generate.json", R"({"prompt":"And God said","generated_ids":[44,76,101],"text":",Le"})");
  write("a/tp/generate.json", R"({"prompt":"And God said","generated_ids":[44,76,102],"text":",Lf"})");
  EXPECT_EQ(run(0, "tokens_match").message,
            "generated token 2 is 102 in phase tp vs 101 in phase dp (prompt 'And God said')");
  write("a/tp/generate.json", R"({"prompt":"And God said","generated_ids":[44,76,101],"text":",Le"})");
  EXPECT_TRUE(run(0, "tokens_match").passed);
}

TEST_F(Checks, TokensMatchReadsTheFileOutputsNames) {
  load(
      "  - name: a\n    phases: [{name: dp}, {name: tp, outputs: {tokens: samples/greedy.json}}]\n"
      "    checks: [{tokens_match: {phase: tp, against: dp}}]\n");
  write("a/dp/generate.json", R"({"prompt":"p","generated_ids":[1,2]})");
  EXPECT_EQ(run(0, "tokens_match").message, "cannot read " + dir_ + "/a/tp/samples/greedy.json");
  fs::create_directories(dir_ + "/a/tp/samples");
  write("a/tp/samples/greedy.json", R"({"prompt":"p","generated_ids":[1,3]})");
  EXPECT_EQ(run(0, "tokens_match").message, "generated token 1 is 3 in phase tp vs 2 in phase dp (prompt 'p')");
}

TEST_F(Checks, ReplicasEqualNamesThePieceAndTheRanks) {
  load("  - name: hsdp\n    checks: [replicas_equal]\n");
  const std::string piece = R"("model.norm.weight":{"offsets":[0],"sizes":[32],"sum":1,"l2":1,"fnv1a64":)";
  write("hsdp/train/rank0.json", "{\"local_params\":{" + piece + "\"0x1\"}}}");
  write("hsdp/train/rank1.json", "{\"local_params\":{" + piece + "\"0x2\"}}}");
  EXPECT_EQ(run(0, "replicas_equal").message,
            "phase train: replicas of model.norm.weight offsets [0] sizes [32] differ: rank 0 has \"0x1\", rank 1 has "
            "\"0x2\"");
  write("hsdp/train/rank1.json", "{\"local_params\":{" + piece + "\"0x1\"}}}");
  EXPECT_TRUE(run(0, "replicas_equal").passed);
}

TEST_F(Checks, ParamsMatchJudgesSumAndNormAgainstTheNorm) {
  load("  - name: a\n  - name: b\n    checks: [{params_match: {baseline: a, rtol: 1.0e-6}}]\n");
  write("a/train/param_digest.json", R"({"params":{"model.w":{"sum":0.5,"l2":10.0}}})");
  write("b/train/param_digest.json", R"({"params":{"model.w":{"sum":0.5001,"l2":10.0}}})");
  EXPECT_EQ(run(1, "params_match").message,
            "model.w: sum 0.5001 in phase train vs 0.5 in baseline s/a (phase train): |diff| 1.00e-04 > atol 0 + "
            "rtol 1e-06 x |10| = 1.00e-05");
  write("b/train/param_digest.json", R"({"params":{"model.w":{"sum":0.500001,"l2":10.0}}})");
  EXPECT_TRUE(run(1, "params_match").passed);
}

// A golden digest, kept beside the matrix (relative paths are the matrix file's folder's).
TEST_F(Checks, ParamsMatchAgainstAGoldenDigestBesideTheMatrix) {
  load("  - name: a\n    checks: [{params_match: {golden: golden/a.json, rtol: 1.0e-6}}]\n");
  fs::create_directories(dir_ + "/golden");
  write("golden/a.json", R"({"params":{"model.w":{"sum":0.5,"l2":10.0},"model.v":{"sum":1.0,"l2":2.0}}})");
  write("a/train/param_digest.json", R"({"params":{"model.w":{"sum":0.5,"l2":10.0},"model.v":{"sum":1.0,"l2":2.0}}})");
  EXPECT_TRUE(run(0, "params_match").passed) << run(0, "params_match").message;
  // Both keys differ; the message names the first, the margin covers both (v: 1e-4 / 2e-6 = 50).
  write("a/train/param_digest.json",
        R"({"params":{"model.w":{"sum":0.50002,"l2":10.0},"model.v":{"sum":1.0001,"l2":2.0}}})");
  const CheckResult r = run(0, "params_match");
  EXPECT_EQ(r.message.rfind(
                "model.v: sum 1.0001 in phase train vs 1 in golden " + dir_ + "/golden/a.json: |diff| 1.00e-04", 0),
            0u)
      << r.message;
  ASSERT_TRUE(r.margin);
  EXPECT_NEAR(*r.margin, 50, 1e-3);
  write("a/train/param_digest.json", R"({"params":{"model.w":{"sum":0.5,"l2":10.0}}})");
  EXPECT_EQ(run(0, "params_match").message, "model.v is in golden " + dir_ + "/golden/a.json but not in phase train");
  EXPECT_FALSE(run(0, "params_match").margin);  // a missing key is no matter of tolerance
}

// saved_once: the ranks' tensor bytes against the saved step's state, both from rank<R>.json.
TEST_F(Checks, SavedOnceComparesTheBytesRanksWroteWithTheStateOnce) {
  load("  - name: ddp\n    checks: [saved_once]\n");
  const std::string step = dir_ + "/ck/step-5";
  fs::create_directories(step);
  std::ofstream(step + "/__0_0.distcp", std::ios::binary) << std::string(24, '\0');
  const nlohmann::json chunk = {
      {"offsets", {0, 0}}, {"sizes", {2, 3}}, {"file", "__0_0.distcp"}, {"byte_offset", 0}, {"byte_length", 24}};
  std::ofstream(step + "/.metadata")
      << nlohmann::json{{"format_version", 2},
                        {"keys",
                         {{"model.w",
                           {{"kind", "tensor"}, {"dtype", "float32"}, {"shape", {2, 3}}, {"chunks", {chunk}}}}}}}
             .dump();
  auto rank_file = [&](int bytes) {
    return nlohmann::json{{"checkpoint_tensor_bytes_written", bytes},
                          {"checkpoint_steps_saved", {5}},
                          {"checkpoint_folder", dir_ + "/ck"}}
        .dump();
  };
  write("ddp/train/rank0.json", rank_file(24));
  write("ddp/train/rank1.json", rank_file(0));
  EXPECT_TRUE(run(0, "saved_once").passed) << run(0, "saved_once").message;
  write("ddp/train/rank1.json", rank_file(24));  // the replica wrote its copy too
  const CheckResult twice = run(0, "saved_once");
  EXPECT_EQ(twice.message,
            "phase train: its 2 ranks wrote 48 tensor bytes for step-5, whose tensors hold 24 (2x): "
            "some chunk was written by more than one rank");
  EXPECT_EQ(twice.details, "rank 0: 24 tensor bytes written\nrank 1: 24 tensor bytes written\n");
  fs::remove_all(dir_ + "/ck");
  EXPECT_EQ(run(0, "saved_once").message, "phase train saved step-5 but " + step +
                                              " is gone (removed by --checkpoint.keep-latest-k or a later phase)");
  fs::remove(dir_ + "/ddp/train/rank1.json");
  EXPECT_EQ(run(0, "saved_once").message,
            "phase train has 2 ranks but left 1 rank<R>.json files in " + dir_ + "/ddp/train");
}

// A phase that left param_digest.json is judged on it even where its outputs name a checkpoint:
// the digest is what the trainer says it ended with, and the checkpoint may be gone.
TEST_F(Checks, ParamsMatchReadsTheDigestAPhaseLeftBeforeTheCheckpointItsOutputsName) {
  load(
      "  - name: a\n    outputs: {checkpoint: {path: gone}}\n"
      "    checks: [{params_match: {golden: golden.json, rtol: 1.0e-6}}]\n");
  write("golden.json", R"({"params":{"model.w":{"sum":0.5,"l2":10.0}}})");
  write("a/train/param_digest.json", R"({"params":{"model.w":{"sum":0.5,"l2":10.0}}})");
  const CheckResult r = run(0, "params_match");
  EXPECT_TRUE(r.passed) << r.message;
}

// A phase with neither a digest nor a checkpoint in its outputs fails naming the digest it
// should have left: that is the file a person looks for.
TEST_F(Checks, ParamsMatchWithoutADigestOrACheckpointNamesTheMissingDigest) {
  load("  - name: a\n    checks: [{params_match: {golden: golden.json, rtol: 1.0e-6}}]\n");
  write("golden.json", R"({"params":{"model.w":{"sum":0.5,"l2":10.0}}})");
  EXPECT_EQ(run(0, "params_match").message, "cannot read " + dir_ + "/a/train/param_digest.json");
}

// The margin measures a difference by its size, below the reference as above it: a subject
// 0.125 under, with a tolerance of 1, is an eighth of the way to failing, not "no difference".
TEST_F(Checks, ParamsMatchMarginCountsADifferenceBelowTheReference) {
  load("  - name: a\n    checks: [{params_match: {golden: golden.json, rtol: 0.1}}]\n");
  write("golden.json", R"({"params":{"model.w":{"sum":0.5,"l2":10.0}}})");
  write("a/train/param_digest.json", R"({"params":{"model.w":{"sum":0.375,"l2":10.0}}})");
  const CheckResult r = run(0, "params_match");
  EXPECT_TRUE(r.passed) << r.message;
  ASSERT_TRUE(r.margin);
  EXPECT_NEAR(*r.margin, 0.125, 1e-12);  // |0.375 - 0.5| / (0.1 x 10)
}

// params_match's bound is inclusive: a difference of exactly atol passes, as every tolerance
// in the judge does.
TEST_F(Checks, ParamsMatchPassesADifferenceExactlyAtItsBound) {
  load("  - name: a\n    checks: [{params_match: {golden: golden.json, rtol: 0, atol: 0.5}}]\n");
  write("golden.json", R"({"params":{"model.w":{"sum":1.5,"l2":10.0}}})");
  write("a/train/param_digest.json", R"({"params":{"model.w":{"sum":1.0,"l2":10.0}}})");
  const CheckResult r = run(0, "params_match");
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_EQ(r.margin, 1.0);
  write("a/train/param_digest.json", R"({"params":{"model.w":{"sum":0.9375,"l2":10.0}}})");
  EXPECT_FALSE(run(0, "params_match").passed);
}

// A phase that left no rank file at all says so, not that it left too few: the trainer wrote
// none of the contract files.
TEST_F(Checks, ReplicasEqualSaysAPhaseLeftNoRankFiles) {
  load("  - name: a\n    checks: [replicas_equal]\n");
  EXPECT_EQ(run(0, "replicas_equal").message, "phase train left no rank<R>.json files in " + dir_ + "/a/train");
}

namespace {
std::string saved_once_rank_file(const std::string& folder, int bytes, const std::vector<long long>& steps = {5}) {
  return nlohmann::json{
      {"checkpoint_tensor_bytes_written", bytes}, {"checkpoint_steps_saved", steps}, {"checkpoint_folder", folder}}
      .dump();
}
}  // namespace

// saved_once counts every tensor of a step, those after an object key (the dataloader's state)
// included: stopping at the object would call a checkpoint written once "written twice".
TEST_F(Checks, SavedOnceCountsTheTensorsAfterAnObjectKey) {
  load("  - name: a\n    checks: [saved_once]\n");
  write_checkpoint(dir_ + "/ck", {{"model.w", {{2, 3}, {1, 2, 3, 4, 5, 6}}}}, {"dataloader"});
  write("a/train/rank0.json", saved_once_rank_file(dir_ + "/ck", 24));
  write("a/train/rank1.json", saved_once_rank_file(dir_ + "/ck", 0));
  const CheckResult r = run(0, "saved_once");
  EXPECT_TRUE(r.passed) << r.message;
}

// A phase that left rank files is judged on them even where its outputs name a checkpoint: the
// ranks' byte counts see a chunk written twice, which the checkpoint alone cannot.
TEST_F(Checks, SavedOnceReadsTheRankFilesWhereTheyExistEvenWithACheckpointInTheOutputs) {
  load("  - name: a\n    outputs: {checkpoint: {path: ck}}\n    checks: [saved_once]\n");
  write_checkpoint(dir_ + "/a/train/ck", {{"model.w", {{2, 3}, {1, 2, 3, 4, 5, 6}}}});
  write("a/train/rank0.json", saved_once_rank_file(dir_ + "/a/train/ck", 24));
  write("a/train/rank1.json", saved_once_rank_file(dir_ + "/a/train/ck", 24));
  EXPECT_EQ(run(0, "saved_once").message,
            "phase train: its 2 ranks wrote 48 tensor bytes for step-5, whose tensors hold 24 (2x): "
            "some chunk was written by more than one rank");
}

// A phase whose rank files list no saved step fails saying so: with nothing saved, nothing
// written is no proof of "saved once".
TEST_F(Checks, SavedOnceFailsAPhaseThatSavedNoCheckpoint) {
  load("  - name: a\n    checks: [saved_once]\n");
  write("a/train/rank0.json", saved_once_rank_file(dir_ + "/ck", 0, {}));
  write("a/train/rank1.json", saved_once_rank_file(dir_ + "/ck", 0, {}));
  EXPECT_EQ(run(0, "saved_once").message, "phase train saved no checkpoint (checkpoint_steps_saved is empty)");
}
