// The checkpoint checks (judge/checkpoint_checks.cpp): keys and tensors, from meshtrain's
// files and from a PyTorch DCP checkpoint where outputs.checkpoint says.
#include "harness/judge/checks_fixture.h"
#include "readers/checkpoint_view.h"

namespace fs = std::filesystem;
using namespace meshtest;

namespace {
const std::string kDcpFixtures = std::string(MESHTEST_SOURCE_DIR) + "/../shared/fixtures/dcp-torch-2.11";
}  // namespace

TEST_F(Checks, KeysMatchListsMissingAndUnexpectedKeysLikeTheSeed) {
  load(R"(  - name: reshard
    phases: [{name: save}, {name: load}]
    checks: [{keys_match: {phase: load, against: save}}]
)");
  write(
      "reshard/save/state_dict_keys.json",
      R"({"format_version":1,"keys":{"model.tok_embeddings.parametrizations.weight.original":{"kind":"tensor","shape":[258,64]},
            "model.norm.weight":{"kind":"tensor","shape":[64]},"dataloader.dp_rank_3":{"kind":"object"}}})");
  write("reshard/load/state_dict_keys.json",
        R"({"format_version":1,"keys":{"model.tok_embeddings.weight":{"kind":"tensor","shape":[258,64]},
            "model.norm.weight":{"kind":"tensor","shape":[64]},"dataloader.dp_rank_0":{"kind":"object"}}})");
  const auto r = run(0, "keys_match");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message,
            "state-dict keys of phase load differ from phase save: missing 1 "
            "(model.tok_embeddings.parametrizations.weight.original); unexpected 1 (model.tok_embeddings.weight)");
  write(
      "reshard/load/state_dict_keys.json",
      R"({"format_version":1,"keys":{"model.tok_embeddings.parametrizations.weight.original":{"kind":"tensor","shape":[258,32]},
            "model.norm.weight":{"kind":"tensor","shape":[64]}}})");
  EXPECT_EQ(run(0, "keys_match").message,
            "state-dict keys of phase load differ from phase save: shape differs for 1 "
            "(model.tok_embeddings.parametrizations.weight.original [258,32] vs [258,64])");
}

TEST_F(Checks, KeysMatchReadsPyTorchDcpMetadataAndMapsTheSeedsKeys) {
  if (!fs::exists(kDcpFixtures)) GTEST_SKIP() << "no " << kDcpFixtures;
  load("  - name: canonical\n    outputs: {checkpoint: {path: '" + kDcpFixtures +
       "/canonical'}}\n"
       "  - name: parametrize\n    outputs: {checkpoint: {path: '" +
       kDcpFixtures +
       "/parametrize/step-5'}}\n"
       "    checks: [{keys_match: {baseline: canonical}}]\n"
       "  - name: mapped\n    outputs: {checkpoint: {path: '" +
       kDcpFixtures +
       "/parametrize', rename: "
       "{'\\.parametrizations\\.weight\\.original$': '.weight'}}}\n"
       "    checks: [{keys_match: {baseline: canonical}}, {tensors_match: {baseline: canonical, rtol: 0, atol: 0}}]\n");
  const auto r = run(1, "keys_match");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message,
            "state-dict keys of phase train differ from baseline s/canonical (phase train): missing 5 "
            "(model.layers.0.attention.wq.weight, model.layers.0.attention_norm.weight, model.norm.weight, ... (2 "
            "more)); unexpected 5 (model.layers.0.attention.wq.parametrizations.weight.original, "
            "model.layers.0.attention_norm.parametrizations.weight.original, "
            "model.norm.parametrizations.weight.original, ... (2 more))");
  EXPECT_NE(r.details.find("  model.tok_embeddings.weight\n"), std::string::npos) << r.details;
  EXPECT_TRUE(run(2, "keys_match").passed) << run(2, "keys_match").message;
  EXPECT_TRUE(run(2, "tensors_match").passed) << run(2, "tensors_match").message;
}

TEST_F(Checks, TensorsMatchComparesADcpCheckpointWithAMeshtrainOneElementByElement) {
  if (!fs::exists(kDcpFixtures)) GTEST_SKIP() << "no " << kDcpFixtures;
  // The DCP fixture's tensors rewritten in meshtrain's format, torchtitan-style (no `model.`
  // prefix), one element of model.norm.weight moved by 0.1.
  const CheckpointView dcp = CheckpointView::open(kDcpFixtures + "/canonical");
  std::map<std::string, FloatTensor> tensors;
  for (const auto& e : dcp.entries()) {
    if (!e.is_tensor) continue;
    std::vector<double> values = dcp.read_tensor(e.key);
    if (e.key == "model.norm.weight") values[3] += 0.1;
    const std::string key = e.key.rfind("model.", 0) == 0 ? e.key.substr(6) : e.key;
    tensors[key] = {e.shape, std::vector<float>(values.begin(), values.end())};
  }
  write_checkpoint(dir_ + "/mt", tensors);
  load(
      "  - name: ref\n    outputs: {checkpoint: {path: '" + kDcpFixtures +
      "/canonical'}}\n"
      "  - name: titan\n    outputs: {checkpoint: {path: '" +
      dir_ +
      "/mt', model_prefix: model.}}\n"
      "    checks: [{keys_match: {baseline: ref}}, {tensors_match: {baseline: ref}}, {params_match: {baseline: ref}}]\n"
      "  - name: bare\n    checks: [{tensors_match: {baseline: ref}}]\n"
      "  - name: same\n    outputs: {checkpoint: {path: '" +
      kDcpFixtures +
      "/canonical'}}\n"
      "    checks: [{params_match: {baseline: ref}}]\n");
  EXPECT_TRUE(run(1, "keys_match").passed) << run(1, "keys_match").message;
  const auto r = run(1, "tensors_match");
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("model.norm.weight[3]: "), std::string::npos) << r.message;
  EXPECT_NE(r.message.find(" in phase train vs "), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("(1 elements in 1 of 15 tensors differ)"), std::string::npos) << r.message;
  EXPECT_NE(r.details.find(dir_ + "/mt/step-5"), std::string::npos) << r.details;
  EXPECT_EQ(outcomes_[1].status(), Status::kFailed);
  EXPECT_EQ(run(2, "tensors_match").message,
            "tensors_match needs outputs.checkpoint on phase train (where its checkpoint is)");
  // params_match on phases that left no param_digest.json: each side digested from its DCP
  // checkpoint. The moved element shows in model.norm.weight's norm; the same checkpoint passes.
  const auto digest = run(1, "params_match");
  EXPECT_FALSE(digest.passed);
  EXPECT_EQ(digest.message.rfind("model.norm.weight: l2 ", 0), 0u) << digest.message;
  EXPECT_TRUE(run(3, "params_match").passed) << run(3, "params_match").message;
}

// saved_once for a DCP trainer (no rank<R>.json): the checkpoint outputs.checkpoint names must
// store each element once. A replicated chunk written by a second rank leaves bytes no record of
// .metadata names (DCP keeps one record per chunk), in a file of its own or after another's.
TEST_F(Checks, SavedOnceReadsADcpCheckpointsRecordsWhereNoRankFilesAre) {
  if (!fs::exists(kDcpFixtures)) GTEST_SKIP() << "no " << kDcpFixtures;
  const std::string copy = dir_ + "/copy/step-5";
  fs::create_directories(copy);
  for (const auto& f : fs::directory_iterator(kDcpFixtures + "/canonical/step-5"))
    fs::copy_file(f.path(), copy + "/" + f.path().filename().string());
  for (const auto& f : fs::directory_iterator(copy))
    fs::permissions(f.path(), fs::perms::owner_write, fs::perm_options::add);
  load("  - name: real\n    outputs: {checkpoint: {path: '" + kDcpFixtures +
       "/canonical'}}\n    checks: [saved_once]\n"
       "  - name: twice\n    outputs: {checkpoint: {path: '" +
       dir_ + "/copy', step: 5}}\n    checks: [saved_once]\n");
  EXPECT_TRUE(run(0, "saved_once").passed) << run(0, "saved_once").message;
  EXPECT_TRUE(run(1, "saved_once").passed) << run(1, "saved_once").message;

  // Rank 1 also wrote model.norm.weight (1577 bytes), after its own records.
  std::ofstream(copy + "/__1_0.distcp", std::ios::binary | std::ios::app) << std::string(1577, 'x');
  const CheckResult appended = run(1, "saved_once");
  EXPECT_FALSE(appended.passed);
  EXPECT_TRUE(appended.judged);
  EXPECT_EQ(appended.message, "phase train: some element was not stored exactly once: " + copy +
                                  "/__1_0.distcp holds 38999 bytes but its records name 37422 (1577 bytes belong to no "
                                  "record: a chunk written twice, whose other copy .metadata kept)");
  fs::resize_file(copy + "/__1_0.distcp", 37422);
  EXPECT_TRUE(run(1, "saved_once").passed);

  // A third rank wrote its copy into a file of its own.
  std::ofstream(copy + "/__2_0.distcp", std::ios::binary) << std::string(1577, 'x');
  EXPECT_EQ(run(1, "saved_once").message, "phase train: some element was not stored exactly once: " + copy +
                                              "/__2_0.distcp is a data file that no record of .metadata names (1577 "
                                              "bytes written for nothing)");
  fs::remove(copy + "/__2_0.distcp");

  // A checkpoint that is not there is a failure to look, not a finding.
  fs::remove_all(dir_ + "/copy");
  const CheckResult gone = run(1, "saved_once");
  EXPECT_FALSE(gone.passed);
  EXPECT_FALSE(gone.judged) << gone.message;
}
