// `meshtest ckpt inspect|diff` (ckpt_cli.h) over real PyTorch DCP checkpoints made by torch
// (tests/fixtures/dcp-made): what a person reads, and diff's exit status.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "ckpt_cli.h"
#include "test_paths.h"

using namespace meshtest;

namespace {

std::string fixture(const std::string& name) { return std::string(MESHTEST_SOURCE_DIR) + "/tests/fixtures/dcp-made/" + name; }

// Runs `command` with a temporary file as its output; returns (status, what it printed).
template <typename Command>
std::pair<int, std::string> printed(Command command) {
  std::FILE* out = std::tmpfile();
  const int status = command(out);
  std::rewind(out);
  std::string text;
  for (int c; (c = std::fgetc(out)) != EOF;) text += static_cast<char>(c);
  std::fclose(out);
  return {status, text};
}

}  // namespace

TEST(CkptCli, InspectListsEveryKeyWithDtypeShapeAndChunks) {
  const auto [status, text] = printed([](std::FILE* out) { return ckpt_inspect(fixture("mesh-2x2"), {}, out); });
  EXPECT_EQ(status, 0);
  EXPECT_NE(text.find("step-3 (pytorch-dcp)"), std::string::npos) << text;  // the newest step of the folder
  EXPECT_NE(text.find("model.w"), std::string::npos) << text;
  EXPECT_NE(text.find("[5,7]"), std::string::npos) << text;
  EXPECT_NE(text.find("4 chunks"), std::string::npos) << text;
  EXPECT_NE(text.find("3 keys"), std::string::npos) << text;
}

TEST(CkptCli, InspectJsonIsOneDocument) {
  CkptOptions o;
  o.json = true;
  const auto [status, text] = printed([&](std::FILE* out) { return ckpt_inspect(fixture("mesh-2x2"), o, out); });
  EXPECT_EQ(status, 0);
  EXPECT_EQ(text.front(), '{') << text;
  EXPECT_NE(text.find("\"model.w\""), std::string::npos) << text;
}

TEST(CkptCli, DiffOfACheckpointWithItselfIsEmptyAndExits0) {
  const auto [status, text] =
      printed([](std::FILE* out) { return ckpt_diff(fixture("mesh-2x2"), fixture("mesh-2x2"), {}, out); });
  EXPECT_EQ(status, 0) << text;
}

TEST(CkptCli, DiffNamesEachKeyThatDiffersAndExits1) {
  const auto [status, text] =
      printed([](std::FILE* out) { return ckpt_diff(fixture("mesh-2x2"), fixture("uneven-shard0"), {}, out); });
  EXPECT_EQ(status, 1);
  EXPECT_NE(text.find("differs: model.w float32 [5,7] vs float32 [7,5]"), std::string::npos) << text;
  EXPECT_NE(text.find("2 differences"), std::string::npos) << text;
}

TEST(CkptCli, AMissingFolderIsAnErrorThatNamesIt) {
  try {
    printed([](std::FILE* out) { return ckpt_inspect("/nonexistent/ckpt", {}, out); });
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/ckpt"), std::string::npos) << e.what();
  }
}
