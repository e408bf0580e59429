// What the real Hugging Face Trainer wrote (tests/fixtures/hf-made/README.md: transformers 5.17,
// accelerate 1.15, torch 2.11, an H100, examples/hf.yaml): checkpoint-4 of one rank (safetensors)
// and of FSDP over 4 ranks (Accelerate's DCP in pytorch_model_fsdp_0/), judged against each other
// as a run's phases are, and refused by name once corrupted.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "harness/judge/checks_fixture.h"
#include "readers/checkpoint_error.h"
#include "readers/checkpoint_view.h"
#include "test_paths.h"

namespace meshtest {
namespace {

namespace fs = std::filesystem;

const fs::path kHfMade = fs::path(MESHTEST_SOURCE_DIR) / "tests" / "fixtures" / "hf-made";

TEST(HfMade, BothCheckpointFoldersOpenAsTheTrainerWroteThem) {
  const CheckpointView one = CheckpointView::open((kHfMade / "one_rank-checkpoint-4").string());
  EXPECT_EQ(one.format(), "safetensors");
  EXPECT_EQ(one.entries().size(), 21u);  // 2 layers of 9 tensors, the embedding, the norm, lm_head
  const CheckpointEntry* embed = one.find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->shape, (std::vector<int64_t>{256, 64}));
  // A checkpoint-<N> folder itself under FSDP: the DCP inside it, keys as Accelerate saved them.
  const CheckpointView fsdp = CheckpointView::open((kHfMade / "fsdp4-checkpoint-4").string());
  EXPECT_EQ(fs::path(fsdp.step_dir()).filename(), "pytorch_model_fsdp_0");
  EXPECT_EQ(fsdp.format(), "pytorch-dcp");
  const CheckpointEntry* sharded = fsdp.find("model.model.embed_tokens.weight");
  ASSERT_NE(sharded, nullptr);
  EXPECT_EQ(sharded->chunks, 4u);
  EXPECT_EQ(sharded->shape, embed->shape);
}

// The hf-trainer adapter's own outputs: the FSDP run's keys map onto the one-rank run's, and its
// weights after 4 steps are the one rank's within 1e-6 (measured: 1.3e-7 at worst, one element of
// a k_proj; reduction order only).
class HfMadeChecks : public Checks {
 protected:
  void place(const std::string& phase_dir, const std::string& fixture) {
    fs::create_directories(dir_ + "/" + phase_dir);
    fs::copy(kHfMade / fixture, dir_ + "/" + phase_dir + "/checkpoint-4", fs::copy_options::recursive);
  }
  // One rank's and FSDP 4's checkpoint-4, the FSDP case with `fsdp_lines` of its own.
  void load_pair(const std::string& fsdp_lines =
                     "    checks: [{keys_match: {baseline: one}}, {tensors_match: {baseline: one, rtol: 1.0e-5, "
                     "atol: 1.0e-6}}]\n") {
    fs::remove_all(dir_ + "/fsdp4");
    fs::remove_all(dir_ + "/one");
    load(
        "  - name: one\n"
        "    adapter: hf-trainer\n"
        "    ngpu: 1\n"
        "  - name: fsdp4\n"
        "    adapter: hf-trainer\n"
        "    ngpu: 4\n"
        "    mesh: {dp_shard: 4}\n" +
        fsdp_lines);
    place("one/train", "one_rank-checkpoint-4");
    place("fsdp4/train", "fsdp4-checkpoint-4");
  }
};

TEST_F(HfMadeChecks, FsdpOverFourRanksHoldsTheOneRanksWeights) {
  load_pair();
  const CheckResult keys = run(1, "keys_match");
  EXPECT_TRUE(keys.passed) << keys.message << "\n" << keys.details;
  const CheckResult values = run(1, "tensors_match");
  EXPECT_TRUE(values.passed) << values.message << "\n" << values.details;
}

TEST_F(HfMadeChecks, ACorruptedCopyIsRefusedByName) {
  // A DCP shard cut short: the file that lacks the bytes is named.
  load_pair();
  fs::resize_file(dir_ + "/fsdp4/train/checkpoint-4/pytorch_model_fsdp_0/__2_0.distcp", 1000);
  CheckResult r = run(1, "tensors_match");
  EXPECT_FALSE(r.passed);
  EXPECT_NE((r.message + r.details).find("__2_0.distcp"), std::string::npos) << r.message << "\n" << r.details;
  // A safetensors header length past the file's end.
  load_pair();
  const std::string model = dir_ + "/one/train/checkpoint-4/model.safetensors";
  fs::permissions(model, fs::perms::owner_read | fs::perms::owner_write);
  {
    std::fstream f(model, std::ios::in | std::ios::out | std::ios::binary);
    const char huge[8] = {0, 0, 0, 0, 0, 0, 0, 1};
    f.write(huge, 8);
  }
  r = run(1, "keys_match");
  EXPECT_FALSE(r.passed);
  EXPECT_NE((r.message + r.details).find("model.safetensors"), std::string::npos) << r.message << "\n" << r.details;
  // Without the FSDP key mapping the keys differ, every one of them, by Accelerate's wrapper.
  load_pair(
      "    outputs: {checkpoint: {rename: {'^lm_head': 'lm_head'}}}\n"
      "    checks: [{keys_match: {baseline: one}}]\n");
  r = run(1, "keys_match");
  EXPECT_FALSE(r.passed);
  EXPECT_NE((r.message + r.details).find("model.model.embed_tokens.weight"), std::string::npos) << r.message;
}

}  // namespace
}  // namespace meshtest
