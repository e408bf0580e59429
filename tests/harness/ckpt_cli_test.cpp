// `meshtest ckpt inspect|diff` (ckpt_cli.h) over real PyTorch DCP checkpoints made by torch
// (tests/fixtures/dcp-made): what a person reads, and diff's exit status.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt_cli.h"
#include "readers/checkpoint_view.h"
#include "test_paths.h"

using namespace meshtest;

namespace {

std::string fixture(const std::string& name) {
  return std::string(MESHTEST_SOURCE_DIR) + "/tests/fixtures/dcp-made/" + name;
}

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

// The bf16 fixture's tensors as a float32 meshtrain checkpoint in `dir`/step-3, each value of
// model.w moved by `nudge` relative (model.norm kept exact), then `change` added to model.w[0];
// train_state.step as an object, so only the tensors can differ.
std::string fp32_copy_of_bf16(const std::string& dir, double nudge, double change) {
  const CheckpointView bf16 = CheckpointView::open(fixture("bf16"));
  const std::string step_dir = dir + "/step-3";
  std::filesystem::create_directories(step_dir);
  std::ofstream data(step_dir + "/__0_0.distcp", std::ios::binary);
  nlohmann::json keys = {{"train_state.step", {{"kind", "object"}, {"value", 3}}}};
  uint64_t offset = 0;
  for (const char* key : {"model.norm", "model.w"}) {
    std::vector<double> values = bf16.read_tensor(key);
    const std::vector<int64_t> shape = bf16.find(key)->shape;
    if (std::string(key) == "model.w") {
      for (double& v : values) v *= 1 + nudge;
      values[0] += change;
    }
    const std::vector<float> f(values.begin(), values.end());
    data.write(reinterpret_cast<const char*>(f.data()), static_cast<std::streamsize>(f.size() * 4));
    keys[key] = {{"kind", "tensor"},
                 {"dtype", "float32"},
                 {"shape", shape},
                 {"chunks",
                  {{{"offsets", std::vector<int64_t>(shape.size(), 0)},
                    {"sizes", shape},
                    {"file", "__0_0.distcp"},
                    {"byte_offset", offset},
                    {"byte_length", f.size() * 4}}}}};
    offset += f.size() * 4;
  }
  std::ofstream(step_dir + "/.metadata") << nlohmann::json{{"format_version", 2}, {"keys", keys}}.dump();
  return step_dir;
}

// A fresh folder of its own (tests of other checkouts may run at the same time), removed after.
struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/meshtest-ckpt-cli-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
};

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

// A bfloat16 export against float32 weights: --values compares the numbers across the dtypes,
// as tensors_match does, and notes the dtype on the tensor's line.
TEST(CkptCli, DiffValuesComparesABf16CheckpointWithAFp32One) {
  const TempDir tmp;
  // model.w moved by 2^-10 relative: below bfloat16's rounding (2^-9), above the default rtol.
  const std::string fp32 = fp32_copy_of_bf16(tmp.path, std::ldexp(1.0, -10), 0);
  CkptOptions o;
  o.values = true;
  o.rtol = 4e-3;  // bfloat16's worst rounding is 2^-8
  const auto [status, text] = printed([&](std::FILE* out) { return ckpt_diff(fixture("bf16"), fp32, o, out); });
  EXPECT_EQ(status, 0) << text;
  EXPECT_NE(text.find("same   model.norm: max |A-B| 0.000e+00 (dtype bfloat16 vs float32)\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("same   model.w: max |A-B| "), std::string::npos) << text;
  EXPECT_EQ(text.find("differs:"), std::string::npos) << text;
  EXPECT_NE(text.find("\nno differences; 2 tensors differ in dtype only\n"), std::string::npos) << text;

  o.rtol = 1e-5;  // the default: 2^-10 relative is outside it
  const auto [strict, strict_text] = printed([&](std::FILE* out) { return ckpt_diff(fixture("bf16"), fp32, o, out); });
  EXPECT_EQ(strict, 1) << strict_text;
  EXPECT_NE(strict_text.find("values model.w: max |A-B| "), std::string::npos) << strict_text;
  EXPECT_NE(strict_text.find(" 24 of 24 outside tolerance (dtype bfloat16 vs float32)\n"), std::string::npos)
      << strict_text;
  EXPECT_NE(strict_text.find("\n1 differences; 1 tensors differ in dtype only\n"), std::string::npos) << strict_text;
}

TEST(CkptCli, DiffValuesAcrossDtypesNamesAValueThatReallyDiffers) {
  const TempDir tmp;
  const std::string fp32 = fp32_copy_of_bf16(tmp.path, 0, 0.5);
  CkptOptions o;
  o.values = true;
  o.rtol = 4e-3;
  const auto [status, text] = printed([&](std::FILE* out) { return ckpt_diff(fixture("bf16"), fp32, o, out); });
  EXPECT_EQ(status, 1) << text;
  EXPECT_NE(text.find("values model.w: max |A-B| 5.000e-01, 1 of 24 outside tolerance (dtype bfloat16 vs float32)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("same   model.norm: max |A-B| 0.000e+00 (dtype bfloat16 vs float32)\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("\n1 differences; 1 tensors differ in dtype only\n"), std::string::npos) << text;
}

// Without --values a dtype is all diff compares of a tensor, so a dtype difference counts.
TEST(CkptCli, DiffWithoutValuesCountsADtypeDifference) {
  const TempDir tmp;
  const std::string fp32 = fp32_copy_of_bf16(tmp.path, 0, 0);
  const auto [status, text] = printed([&](std::FILE* out) { return ckpt_diff(fixture("bf16"), fp32, {}, out); });
  EXPECT_EQ(status, 1) << text;
  EXPECT_NE(text.find("differs: model.w bfloat16 [6,4] vs float32 [6,4]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\n2 differences\n"), std::string::npos) << text;
}

TEST(CkptCli, AMissingFolderIsAnErrorThatNamesIt) {
  try {
    printed([](std::FILE* out) { return ckpt_inspect("/nonexistent/ckpt", {}, out); });
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/ckpt"), std::string::npos) << e.what();
  }
}
